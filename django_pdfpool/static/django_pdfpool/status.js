/* The PDF pool status page: poll ?format=json and update the page in place.
   Formats, the state badge and chart geometry mirror django_pdfpool/status/page.py. On
   any error, or no answer within five periods, the polling stops and the page says it is
   stale; a reload starts it again. */
"use strict";
(function () {
    const root = document.getElementById("pdfpool-status");
    if (!root || !window.fetch) return;
    const every = parseInt(root.dataset.refresh, 10) || 2000;
    const url = new URL(root.dataset.jsonUrl, window.location.href);
    const live = document.getElementById("pdfpool-live");
    const W = 600, H = 100;

    function fmt(value, kind) {
        if (kind === "seconds") {
            if (value === null || value === undefined) return "no limit";
            if (value < 1) return (value * 1000).toFixed(0) + " ms";
            if (value < 10) return value.toFixed(1) + " s";
            if (value < 59.5) return value.toFixed(0) + " s";
            const whole = Math.round(value), minutes = Math.floor(whole / 60), seconds = whole % 60;
            return minutes + " min" + (seconds ? " " + String(seconds).padStart(2, "0") + " s" : "");
        }
        if (kind === "lease") return value > 0 ? value.toFixed(1) + " s" : "ended";  // not yet reaped
        if (kind === "fits") return value ? "" : "with the server, over that";
        if (kind === "bytes") {
            for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
                if (value >= size) return (value / size).toFixed(0) + " " + unit;
            }
            return value + " B";
        }
        if (kind === "clock") return value === null || value === undefined ? "no event yet" : clock(value);
        return String(value);
    }

    function get(data, path) {
        return path.split(".").reduce((obj, part) => (obj == null ? obj : obj[part]), data);
    }

    const clockFormat = clockIn(root.dataset.timeZone);

    function clockIn(zone) {
        // The page's H:i:s, 00 to 23, in the time zone the server wrote its times in; a name
        // Intl refuses ("localtime", "posix/..."): the UTC offset the snapshot was taken at.
        const options = {hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23"};
        try {
            return new Intl.DateTimeFormat("en-GB", {...options, timeZone: zone});
        } catch (error) {
            const taken = live.querySelector("time").getAttribute("datetime");
            return new Intl.DateTimeFormat("en-GB", {...options, timeZone: taken.slice(-6)});
        }
    }

    function clock(epoch) {
        return clockFormat.format(new Date(epoch * 1000));
    }

    function setText(el, text) {
        if (el.textContent !== text) el.textContent = text;
    }

    function updateFields(data) {
        for (const el of root.querySelectorAll("[data-field]")) {
            const path = el.dataset.field, kind = el.dataset.format || "int";
            if (kind === "figure") {  // a duration, or a dash while there are no samples
                const prefix = path.slice(0, path.lastIndexOf("."));
                setText(el, get(data, prefix + ".count") ? fmt(get(data, path), "seconds") : "\u2014");
            } else {
                setText(el, fmt(get(data, path), kind));
            }
            if (el.closest("tr.refused")) el.classList.toggle("alarm", el.textContent !== "0");
        }
    }

    function updateGauges(data) {
        for (const gauge of root.querySelectorAll("[data-gauge]")) {
            const value = data[gauge.dataset.gauge], limit = data[gauge.dataset.of];
            const width = limit ? Math.min(100, (100 * value) / limit) : 0;
            gauge.querySelector(".fill").setAttribute("width", width.toFixed(1));
            gauge.classList.toggle("full", limit > 0 && value >= limit);
        }
        const state = document.getElementById("pdfpool-state"), [text, refusing] = stateOf(data);
        state.classList.toggle("refusing", refusing);
        setText(state, text);
    }

    function stateOf(data) {
        if (data.closed) return ["closed: accepting no new work", true];
        if (data.cluster && data.cluster.mismatch) return ["refusing every job: " + data.cluster.mismatch, true];
        if (data.cluster && data.cluster.mode === "refusing") return ["refusing new work: Redis is failing", true];
        if (data.sandbox.refusing) return ["refusing extractions: sandbox below SANDBOX[\"REQUIRE\"]", true];
        if (data.cluster && data.cluster.mode === "redis" && data.scope !== "cluster") {
            return ["unsure: Redis did not answer this reading", true];  // the pool judges it after
        }
        return ["accepting work", false];
    }

    function cell(text, className) {
        const td = document.createElement("td");
        if (className) td.className = className;
        td.textContent = text;
        return td;
    }

    function callerCell(entry) {
        // A signed-in caller's username, ``user:<pk>`` on hover; any other caller as it is.
        if (!entry.caller_name) return cell(entry.caller);
        const name = document.createElement("span");
        name.title = entry.caller;
        name.textContent = entry.caller_name;
        const td = cell("");
        td.append(name);
        return td;
    }

    function updateJobs(data) {
        const rows = data.jobs.map((job) => {
            const tr = document.createElement("tr");
            tr.className = job.state;
            const key = document.createElement("code");
            key.title = job.key;
            key.textContent = job.short_key;
            const keyCell = cell("");
            keyCell.append(key);
            const badge = document.createElement("span");
            badge.className = "pdfpool-badge " + job.state;
            badge.textContent = job.state;
            const stateCell = cell("");
            stateCell.append(badge);
            tr.append(keyCell, callerCell(job), stateCell, cell(String(job.sharers), "num"),
                cell(fmt(job.queued_for, "seconds"), "num"),
                cell(job.started_at ? fmt(job.running_for, "seconds") : "\u2014", "num"));
            return tr;
        });
        fill("pdfpool-jobs", rows, "No jobs in flight.", 6);
    }

    function row(...cells) {
        const tr = document.createElement("tr");
        tr.append(...cells);
        return tr;
    }

    function fill(id, rows, empty, columns) {
        // The table body ``id`` (if the page has it): ``rows``, or one saying ``empty``.
        const body = document.getElementById(id);
        if (!body) return;
        if (!rows.length) {
            const td = cell(empty);
            td.colSpan = columns;
            rows = [row(td)];
            rows[0].className = "empty";
        }
        body.replaceChildren(...rows);
    }

    function updateTables(data) {
        fill("pdfpool-door", data.door.held.map((held) => row(callerCell(held), cell(held.kind),
            cell(String(held.received), "num"), cell(fmt(held.age, "seconds"), "num"),
            cell(fmt(Math.max(0, held.left), "seconds"), "num"))), "No body arriving.", 5);
        fill("pdfpool-peaks", data.memory.recent_jobs.map((job) => row(cell(clock(job.ended)),
            cell(fmt(job.peak_rss, "bytes"), "num"), cell(job.start))), "No job ended yet.", 3);
        if (!data.cluster) return;
        fill("pdfpool-processes", data.cluster.processes.map((hold) => row(
            cell(hold.host + ":" + hold.pid + (hold.process === data.cluster.process ? " (this one)" : "")),
            cell(String(hold.running.length)), cell(String(hold.queued.length)),
            cell(String(hold.waiting)), cell(fmt(hold.lease_left, "lease")))),
            "No process holds anything.", 5);
    }

    function updateCharts(data) {
        const h = data.history, end = data.taken_at, capacity = Math.max(1, data.slots + data.queue);
        const y = (value, scale) => (H - (H * value) / scale).toFixed(1);
        const points = [];
        for (let i = 0; i < h.t.length; i++) {
            if (end - h.t[i] > h.window) continue;
            points.push([W * (1 - (end - h.t[i]) / h.window), Math.min(h.running[i], capacity),
                Math.min(h.running[i] + h.queued[i], capacity), h.refused[i]]);
        }
        const peak = points.reduce((max, p) => Math.max(max, p[3]), 0);
        const bar = Math.max(1, (W * h.interval) / h.window);
        let running = "", queued = "", refused = "";
        if (points.length) {
            const tops = points.map(([x, , t]) => "L" + x.toFixed(1) + "," + y(t, capacity));
            const mids = points.map(([x, r]) => "L" + x.toFixed(1) + "," + y(r, capacity));
            const first = points[0][0].toFixed(1), last = points[points.length - 1][0].toFixed(1);
            running = "M" + first + "," + H + " " + mids.join(" ") + " L" + last + "," + H + " Z";
            queued = "M" + first + "," + y(points[0][1], capacity) + " " + tops.join(" ") + " " +
                mids.slice().reverse().join(" ") + " Z";
            refused = points.filter((p) => p[3]).map(([x, , , n]) =>
                "M" + (x - bar).toFixed(1) + "," + H + " V" + y(n, peak) + " h" + bar.toFixed(1) +
                " V" + H + " Z").join(" ");
        }
        const load = document.getElementById("pdfpool-load-chart");
        load.querySelector("path.running").setAttribute("d", running);
        load.querySelector("path.queued").setAttribute("d", queued);
        const slotsY = y(data.slots, capacity);
        load.querySelector("line.slots").setAttribute("y1", slotsY);
        load.querySelector("line.slots").setAttribute("y2", slotsY);
        document.querySelector("#pdfpool-refused-chart path.refused").setAttribute("d", refused);
        setText(document.getElementById("pdfpool-refused-peak"), String(peak));
    }

    function updateProcess(data) {
        // Another process answered: say so, and whose the figures now are.
        const before = root.dataset.pid, now = String(data.pid);
        if (before === now) return;
        root.dataset.pid = now;
        const note = document.getElementById("pdfpool-switched");
        const whose = data.scope === "cluster"
            ? "the cluster-wide figures are the same whichever process answers; the \u201cThis process\u201d column and the chart's history are now " + now + "'s."
            : "each process has its own pool, so every figure below is now " + now + "'s, counted since its pool was built.";
        setText(note, "At " + clock(data.taken_at) + " a refresh was answered by process " + now +
            " instead of " + before + ": " + whose);
        note.hidden = false;
    }

    function show(data) {
        updateProcess(data);
        updateFields(data);
        updateGauges(data);
        updateJobs(data);
        updateTables(data);
        updateCharts(data);
        live.className = "pdfpool-live live";
        setText(live, "Live, updated " + clock(data.taken_at));
        root.dataset.updates = String((parseInt(root.dataset.updates, 10) || 0) + 1);
    }

    function stale(reason) {
        live.className = "pdfpool-live stale";
        live.title = reason;
        setText(live, "Stale: " + live.textContent.replace(/^(Live, )?/, "") + " (reload to resume)");
    }

    async function poll() {
        if (document.hidden) {
            setTimeout(poll, every);
            return;
        }
        try {
            const response = await fetch(url, {credentials: "same-origin", headers: {Accept: "application/json"},
                cache: "no-store", signal: AbortSignal.timeout(5 * every)});  // a hung answer is stale too
            const type = response.headers.get("Content-Type") || "";
            if (!response.ok || response.redirected || !type.startsWith("application/json")) {
                throw new Error("HTTP " + response.status + (response.redirected ? " (signed out?)" : ""));
            }
            const data = await response.json();
            if (data.scope !== root.dataset.scope) {  // Redis failing or back: whose figures
                window.location.reload();             // changed, and with them the page's
                return;                               // columns and sentences
            }
            show(data);
        } catch (error) {
            stale(String(error));
            return;
        }
        setTimeout(poll, every);
    }

    setTimeout(poll, every);
})();

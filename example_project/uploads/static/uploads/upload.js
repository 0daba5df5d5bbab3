// The upload page, enhanced: the file goes to the JSON API while the page polls the
// job's state (queued, with how many ahead, or running) from /api/jobs/<sha256>/,
// then shows the result, or a refusal with a countdown to its retry button, in place.
// The file's SHA-256, computed here, is declared in a Pdf-Digest header (RFC 9530's
// syntax), so that with every place taken the server's door lets in an upload that would
// join a job in flight and refuses one that would not before its body is sent.
// Without this script the form posts to the page, which answers the same things.
"use strict";

(() => {
    const form = document.getElementById("upload-form");
    if (!form || !window.fetch || !window.FormData) return;
    const input = form.elements.file;
    const button = form.querySelector("button[type=submit]");
    const progress = document.getElementById("progress");
    const progressText = document.getElementById("progress-text");
    const outcome = document.getElementById("outcome");
    const texts = JSON.parse(document.getElementById("friendly-texts").textContent);
    const POLL_MS = 400;
    let countdown = null;

    form.addEventListener("submit", (event) => {
        event.preventDefault();
        if (input.files.length) send(input.files[0]);
    });

    async function send(file) {
        clearInterval(countdown);
        outcome.replaceChildren();
        button.disabled = true;
        report(`Uploading ${file.name}…`);
        const digest = await sha256(file).catch(() => null);
        const poll = digest ? watch(digest) : null;
        if (!digest) report(`Uploading and extracting ${file.name}…`);
        let response = null;
        let body = null;
        // a header no other site can make a browser send (see views.scripts_only)
        const headers = { Accept: "application/json", "X-Requested-With": "fetch" };
        if (digest) headers["Pdf-Digest"] = declared(digest);
        try {
            response = await fetch(form.dataset.api, {
                method: "POST",
                body: new FormData(form),
                headers,
            });
            body = await response.json().catch(() => null);
        } catch {
            response = null; // the server could not be reached
        } finally {
            if (poll) poll.stop();
            progress.hidden = true;
            button.disabled = false;
        }
        if (response && response.ok && body) showResult(body, file.name);
        else showProblem(response, body);
    }

    // The file's SHA-256, as the server will compute it; null where the browser has no
    // crypto.subtle (outside a secure context): the page then shows no queue position.
    async function sha256(file) {
        if (!window.crypto || !crypto.subtle) return null;
        const digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
        return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
    }

    // Characters as Python counts them (code points): an emoji is one, not two UTF-16 units.
    function length(text) {
        let count = 0;
        for (const _ of text) count += 1;
        return count;
    }

    // The API sends the pages only (the text once): the joined text's length, separators
    // ("\n\n" between pages) included, as the server-rendered page counts it.
    function characters(pages) {
        const separators = 2 * Math.max(0, pages.length - 1);
        return pages.reduce((sum, page) => sum + length(page), separators);
    }

    // "sha-256=:<base64>:" for a hex digest: what the door reads in Pdf-Digest.
    function declared(hex) {
        const bytes = hex.match(/../g).map((pair) => parseInt(pair, 16));
        return `sha-256=:${btoa(String.fromCharCode(...bytes))}:`;
    }

    function report(text) {
        progressText.textContent = text;
        progress.hidden = false;
    }

    // Poll the job's state until stopped; a failed poll is retried at the next tick.
    function watch(digest) {
        const url = form.dataset.jobs.replace("{sha256}", digest);
        let stopped = false;
        let timer = null;
        const tick = async () => {
            try {
                const response = await fetch(url, { headers: { Accept: "application/json" } });
                if (!stopped && response.ok) describe(await response.json());
            } catch {
                // the next tick tries again
            }
            if (!stopped) timer = setTimeout(tick, POLL_MS);
        };
        timer = setTimeout(tick, 100);
        return {
            stop() {
                stopped = true;
                clearTimeout(timer);
            },
        };
    }

    function describe(job) {
        if (job.state === "queued") {
            const ahead = job.ahead === 0 ? "yours is next" : `${job.ahead} ahead of yours`;
            report(`Queued: ${ahead}, ${job.running} of ${job.slots} slots busy…`);
        } else if (job.state === "running") {
            report(job.running_for < 1 ? "Extracting…" : `Extracting… ${seconds(job.running_for)}`);
        }
    }

    // As django_pdfpool.status.page.fmt (and the template filters), so both paths read alike.
    function seconds(value) {
        if (value < 1) return `${(value * 1000).toFixed(0)} ms`;
        if (value < 10) return `${value.toFixed(1)} s`;
        if (value < 59.5) return `${value.toFixed(0)} s`;
        const minutes = Math.floor(Math.round(value) / 60);
        const rest = Math.round(value) % 60;
        return rest ? `${minutes} min ${String(rest).padStart(2, "0")} s` : `${minutes} min`;
    }

    function bytes(value) {
        for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
            if (value >= size) return `${(value / size).toFixed(0)} ${unit}`;
        }
        return `${value} B`;
    }

    function el(tag, attributes = {}, ...children) {
        const node = document.createElement(tag);
        for (const [name, value] of Object.entries(attributes)) {
            if (value === true) node.setAttribute(name, "");
            else if (value !== false && value != null) node.setAttribute(name, value);
        }
        node.append(...children);
        return node;
    }

    // The same markup as templates/uploads/_result.html.
    function showResult(pdf, name) {
        const fact = (label, field, value) =>
            el("div", {}, el("dt", {}, label), el("dd", { "data-field": field }, String(value)));
        const result = el(
            "article",
            { class: "result", id: "result" },
            el("h2", { class: "filename" }, name),
            el(
                "dl",
                { class: "facts" },
                fact("Pages", "page_count", pdf.page_count),
                fact("Characters", "characters", characters(pdf.pages)),
                fact("Extraction time", "elapsed", seconds(pdf.elapsed)),
                fact("Peak memory", "peak_rss", bytes(pdf.peak_rss)),
            ),
        );
        const pages = pdf.pages.length;
        if (pdf.text_truncated) {
            result.append(el("p", { class: "note" },
                "The text stops at the server's limit on text: the rest was not extracted."));
        } else if (pdf.truncated) {
            result.append(el("p", { class: "note" },
                `Only ${pages} page${pages === 1 ? "" : "s"} extracted (the server's page limit).`));
        }
        result.append(el("h3", {}, "Metadata"));
        const metadata = Object.entries(pdf.metadata).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
        if (metadata.length) {
            const rows = metadata.map(([key, value]) =>
                el("tr", {}, el("th", { scope: "row" }, key), el("td", {}, value)));
            result.append(el("table", { class: "metadata" }, el("tbody", {}, ...rows)));
        } else {
            result.append(el("p", { class: "muted" }, "This PDF has no metadata."));
        }
        result.append(el("h3", {}, "Text"));
        pdf.pages.forEach((text, index) => {
            result.append(el(
                "details",
                { class: "page", open: index === 0 },
                el("summary", {}, `Page ${index + 1} `,
                    el("span", { class: "muted" }, `· ${length(text)} characters`)),
                text ? el("pre", {}, text) : el("p", { class: "muted" }, "No text on this page."),
            ));
        });
        result.append(el("p", { class: "digest" }, "SHA-256 ", el("code", {}, pdf.sha256)));
        outcome.replaceChildren(result);
    }

    // The same markup as templates/uploads/_problem.html, plus a retry button that
    // becomes active once the server's Retry-After has passed.
    function showProblem(response, body) {
        const status = response ? response.status : 0;
        const retryAfter = Number(response && response.headers.get("Retry-After")) || 0;
        const title = texts.titles[status] || (response ? "Something went wrong" : "No answer");
        const message = (body && (texts.messages[body.error] || body.message))
            || (response ? `The server answered with status ${status}.`
                : "The server could not be reached. Is it running?");
        const busy = status === 429 || status === 503;
        const panel = el(
            "div",
            { class: `problem ${busy ? "busy" : "error"}`, role: "alert", "data-status": status },
            el("h2", {}, title),
            el("p", {}, message),
        );
        if (retryAfter) {
            const left = el("strong", {});
            const again = el("button", { type: "button", class: "retry", disabled: true }, "Try again");
            const line = el("p", { class: "retry" }, "Try again in ", left, ".");
            panel.append(line, again);
            let remaining = retryAfter;
            const update = () => {
                if (remaining > 0) {
                    left.textContent = `${remaining} second${remaining === 1 ? "" : "s"}`;
                    remaining -= 1;
                    return;
                }
                clearInterval(countdown);
                line.textContent = "You can try again now.";
                again.disabled = false;
            };
            update();
            countdown = setInterval(update, 1000);
            again.addEventListener("click", () => form.requestSubmit());
        }
        outcome.replaceChildren(panel);
    }
})();

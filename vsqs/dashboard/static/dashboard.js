// The vsqs dashboard: live refresh, sorting and filtering. Served from the package;
// loaded by <script src>, never inline (the Content-Security-Policy allows no other).
// Every value from the server is put in the page as text (textContent), never as HTML.
"use strict";

(function () {
  const body = document.body;
  const every = Math.max(1, parseFloat(body.dataset.every || "5")) * 1000;

  function count(value) {
    if (value === null || value === undefined) return "-";
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return value.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
  }
  function age(seconds) {
    if (seconds === null || seconds === undefined) return "-";
    if (seconds < 60) return seconds.toFixed(0) + " s";
    if (seconds < 3600) return (seconds / 60).toFixed(1) + " min";
    if (seconds < 86400) return (seconds / 3600).toFixed(1) + " h";
    return (seconds / 86400).toFixed(1) + " d";
  }
  function rate(value) {
    if (value === null || value === undefined) return "-";
    if (value >= 10 || Number.isInteger(value)) {
      return value.toLocaleString("en-US", { maximumFractionDigits: 0 }) + "/s";
    }
    return value.toFixed(1) + "/s";
  }
  function when(unix) {
    if (unix === null || unix === undefined) return "-";
    return new Date(unix * 1000).toISOString().slice(0, 19).replace("T", " ") + " UTC";
  }
  function queueUrl(name) {
    return "/ui/queue/" + encodeURIComponent(name);
  }
  function link(name) {
    const a = document.createElement("a");
    a.href = queueUrl(name);
    a.textContent = name;
    return a;
  }
  function numeric(value) {
    return value === null || value === undefined ? "-1" : String(value);
  }
  // A number that could not be read: an em dash, the reason on hover (_pages.unknown).
  function unknown(reason) {
    const span = document.createElement("span");
    span.className = "unknown";
    span.title = reason;
    span.textContent = "\u2014";
    return span;
  }
  // Something to look at (_pages._flag).
  function flag(text, title) {
    const span = document.createElement("span");
    span.className = "flag";
    span.title = title;
    span.textContent = text;
    return span;
  }
  // A dead-letter queue holding messages (_pages._dead_letters_held), or null.
  function deadLettersHeld(row) {
    const sources = row.sources || [];
    if (!sources.length || !row.depth) return null;
    return flag(
      count(row.depth) + " dead letters",
      "Dead-letter queue of " + sources.join(", ") + ": " + count(row.depth) +
        " messages failed there and wait to be looked at (redrive them, or purge)",
    );
  }

  // One overview cell: [node or text, sort value]; mirrors _pages._cell.
  function cell(kind, row, key) {
    const value = row[key];
    if (kind === "name") {
      const span = document.createElement("span");
      span.appendChild(link(value));
      const held = deadLettersHeld(row);
      if (held) {
        span.appendChild(document.createTextNode(" "));
        span.appendChild(held);
      }
      if (row.error) {  // _pages._unreadable
        const err = document.createElement("span");
        err.className = "error";
        err.title = row.error;
        err.textContent = "cannot be read (" + row.error.split(":", 1)[0] + ")";
        span.appendChild(document.createTextNode(" "));
        span.appendChild(err);
      }
      return [span, value];
    }
    if (row.error && kind !== "dlq") return [unknown("Unknown: " + row.error), "-1"];
    if (kind === "count") return [count(value), numeric(value)];
    if (kind === "age") return [age(value), numeric(value)];
    if (kind === "rate") return [rate(value), numeric(value)];
    if (kind === "redelivered") {
      return [(row.redelivered_capped ? "\u2265 " : "") + count(value), numeric(value)];
    }
    if (kind === "dlq") {
      if (!value) return ["-", ""];
      const span = document.createElement("span");
      span.appendChild(link(value));
      const depth = row.dead_letter_depth;
      if (depth === null || depth === undefined) {
        span.appendChild(document.createTextNode(" ("));
        span.appendChild(unknown("Unknown: the dead-letter queue was not sampled"));
        span.appendChild(document.createTextNode(")"));
      } else if (depth) {
        span.appendChild(document.createTextNode(" "));
        span.appendChild(flag(count(depth), count(depth) + " messages in the dead-letter queue"));
      } else {
        span.appendChild(document.createTextNode(" (0)"));
      }
      return [span, value];
    }
    if (kind === "bool") return [value ? "yes" : "no", value ? "1" : "0"];
    if (kind === "state") return [value ? "shut down" : "open", value ? "1" : "0"];
    return ["?", ""];
  }

  function setStatus(text) {
    const status = document.getElementById("status");
    if (status) status.textContent = text;
  }

  function poll(url, onData) {
    let etag = null;
    async function tick() {
      try {
        const headers = etag ? { "If-None-Match": etag } : {};
        const response = await fetch(url, { headers: headers, cache: "no-store" });
        if (response.status === 200) {
          etag = response.headers.get("ETag");
          onData(await response.json());
          setStatus("");
        } else if (response.status !== 304) {
          setStatus("(refresh failed: HTTP " + response.status + ")");
        }
      } catch (error) {
        setStatus("(refresh failed: the server cannot be reached)");
      }
      window.setTimeout(tick, every);
    }
    window.setTimeout(tick, every);
  }

  function overview() {
    const table = document.getElementById("overview");
    const heads = Array.from(table.tHead.rows[0].cells);
    const columns = heads.map((th) => [th.dataset.key, th.dataset.kind]);
    const tbody = table.tBodies[0];
    const filter = document.getElementById("filter");
    let sortIndex = 0;
    let descending = false;

    function compare(a, b) {
      const x = a.cells[sortIndex].dataset.sort;
      const y = b.cells[sortIndex].dataset.sort;
      const kind = columns[sortIndex][1];
      let order;
      if (kind === "name" || kind === "dlq") order = x.localeCompare(y);
      else order = parseFloat(x) - parseFloat(y);
      if (order === 0) order = a.dataset.name.localeCompare(b.dataset.name);
      return descending ? -order : order;
    }
    function arrange() {
      const rows = Array.from(tbody.rows).sort(compare);
      const needle = filter.value.trim().toLowerCase();
      for (const row of rows) {
        row.hidden = needle !== "" && !row.dataset.name.toLowerCase().includes(needle);
        tbody.appendChild(row);
      }
      heads.forEach((th, i) => {
        th.setAttribute("aria-sort", i === sortIndex ? (descending ? "descending" : "ascending") : "none");
      });
    }
    heads.forEach((th, i) => {
      th.querySelector("button").addEventListener("click", () => {
        descending = sortIndex === i ? !descending : columns[i][1] !== "name";
        sortIndex = i;
        arrange();
      });
    });
    filter.addEventListener("input", arrange);

    function render(document_) {
      const fresh = document.createDocumentFragment();
      for (const row of document_.queues) {
        const tr = document.createElement("tr");
        tr.dataset.name = row.name;
        for (const [key, kind] of columns) {
          const td = document.createElement("td");
          const [content, sort] = cell(kind, row, key);
          if (typeof content === "string") td.textContent = content;
          else td.appendChild(content);
          td.dataset.sort = sort;
          tr.appendChild(td);
        }
        fresh.appendChild(tr);
      }
      tbody.replaceChildren(fresh);
      arrange();
      document.getElementById("count").textContent = String(document_.queues.length);
      document.getElementById("updated").textContent = when(document_.taken_at);
    }
    arrange();
    poll(body.dataset.api, render);
  }

  function queuePage() {
    const charts = Array.from(document.querySelectorAll(".charts img"));
    const sources = charts.map((img) => img.getAttribute("src"));
    const formats = {
      ready: count, held: count, delayed: count, new: count, produced: count,
      consumed: count, oldest_age: age, in_rate: rate, out_rate: rate,
    };
    poll(body.dataset.api, (row) => {
      for (const span of document.querySelectorAll("[data-field]")) {
        const key = span.dataset.field;
        if (row.error) {
          span.className = "unknown";
          span.title = "Unknown: " + row.error;
          span.textContent = "\u2014";
          continue;
        }
        span.className = "";
        span.removeAttribute("title");
        if (key === "shutdown") span.textContent = row.shutdown ? "shut down" : "open";
        else if (key === "redelivered") {
          span.textContent = (row.redelivered_capped ? "\u2265 " : "") + count(row.redelivered);
        } else if (formats[key]) span.textContent = formats[key](row[key]);
      }
      document.getElementById("updated").textContent = when(row.sampled_at);
      charts.forEach((img, i) => {
        img.src = sources[i] + "?t=" + Date.now();
      });
    });
  }

  if (body.dataset.page === "overview") overview();
  else if (body.dataset.page === "queue") queuePage();
})();

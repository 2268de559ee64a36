// meshbench serve: live progress over server-sent events, and E3's experimenter client.
// Hand-written, no framework; every page also works without it where a form can do the job.
"use strict";

(function () {
  const csrfToken = () => {
    const meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  };

  const node = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  };

  const svgNode = (tag, attrs, text) => {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  const duration = (seconds) => {
    if (seconds === null || seconds === undefined) return "";
    const s = Math.max(0, Math.round(seconds));
    const m = Math.floor(s / 60);
    return "ETA " + (m > 0 ? `${m} min ${s % 60} s` : `${s} s`);
  };

  // ---- a run's (or a verification's) live progress ----

  function watchProgress(section) {
    const unit = section.dataset.unit || "cells";
    const bar = document.getElementById("progress");
    const text = document.getElementById("progress-text");
    const eta = document.getElementById("eta");
    const current = document.getElementById("current");
    const liveRows = document.querySelector("#live tbody");
    const chart = document.getElementById("live-chart");
    const log = document.getElementById("log");
    const status = document.getElementById("status");
    let seconds = [];

    const setStatus = (name) => {
      if (!status) return;
      status.replaceChildren(node("span", name, "badge status-" + name));
    };
    const setProgress = (done, total, etaSeconds, cur) => {
      const percent = total > 0 ? Math.floor((done * 100) / total) : 0;
      bar.max = Math.max(total, 1);
      bar.value = done;
      bar.textContent = percent + "%";
      text.textContent = `${done}/${total} ${unit} (${percent}%)`;
      eta.textContent = duration(etaSeconds);
      if (cur !== undefined) current.textContent = cur || "";
    };
    const drawChart = () => {
      chart.replaceChildren();
      if (seconds.length === 0) return;
      const w = 600, h = 160, left = 40, bottom = 20, top = 10;
      const max = Math.max(...seconds.map((s) => s.p99_ms)) * 1.1 || 1;
      const x = (i) => left + (seconds.length === 1 ? 0 : (i * (w - left - 10)) / (seconds.length - 1));
      const y = (v) => top + (h - top - bottom) * (1 - v / max);
      chart.append(svgNode("text", { x: 2, y: top + 8 }, max.toFixed(2) + " ms"));
      chart.append(svgNode("text", { x: 2, y: h - bottom }, "0"));
      chart.append(svgNode("text", { x: left, y: h - 4 }, `seconds of ${seconds[0].cell}`));
      for (const [key, colour] of [["p50_ms", "#2454a6"], ["p99_ms", "#d9822b"]]) {
        const points = seconds.map((s, i) => `${x(i)},${y(s[key])}`).join(" ");
        chart.append(svgNode("polyline", { points, fill: "none", stroke: colour, "stroke-width": 2 }));
        chart.append(svgNode("text", { x: w - 60, y: key === "p50_ms" ? 20 : 34, style: `fill: ${colour}` }, key.replace("_ms", "")));
      }
    };
    const addSecond = (s) => {
      if (!liveRows) return;
      if (seconds.length && seconds[0].cell !== s.cell) seconds = [];
      seconds.push(s);
      if (seconds.length > 600) seconds.shift();
      const row = node("tr");
      for (const v of [s.second, s.achieved_rps, s.p50_ms.toFixed(3), s.p99_ms.toFixed(3), s.failures]) {
        row.append(node("td", String(v)));
      }
      liveRows.prepend(row);
      while (liveRows.children.length > 10) liveRows.lastChild.remove();
      drawChart();
    };
    const addLog = (line) => {
      log.append(node("li", line.text, "log-" + line.level));
      while (log.children.length > 200) log.firstChild.remove();
      log.scrollTop = log.scrollHeight;
    };

    const source = new EventSource(section.dataset.events);
    source.addEventListener("snapshot", (e) => {
      const job = JSON.parse(e.data);
      if (job.done === undefined) return;
      setStatus(job.status);
      setProgress(job.done, job.total, job.eta_seconds, job.current);
      seconds = [];
      if (liveRows) liveRows.replaceChildren();
      for (const s of job.live || []) addSecond(s);
      log.replaceChildren();
      for (const line of job.log || []) addLog(line);
    });
    source.addEventListener("status", (e) => {
      const s = JSON.parse(e.data);
      setStatus(s.status);
      setProgress(s.done, s.total, s.eta_seconds, s.current);
    });
    source.addEventListener("second", (e) => addSecond(JSON.parse(e.data)));
    source.addEventListener("log", (e) => addLog(JSON.parse(e.data)));
    source.addEventListener("done", (e) => {
      const d = JSON.parse(e.data);
      source.close();
      setStatus(d.status);
      current.textContent = d.reason || "";
      // The page with the report and downloads.
      setTimeout(() => window.location.reload(), 800);
    });
  }

  // ---- E3's experimenter ----

  function e3Client() {
    const form = document.getElementById("e3-form");
    const errorBox = document.getElementById("e3-error");
    const section = document.getElementById("e3-result");
    let current = null;
    let csvUrl = null, jsonUrl = null;

    const showError = (message, field) => {
      errorBox.textContent = message;
      errorBox.hidden = false;
      for (const input of form.querySelectorAll("[aria-invalid]")) input.removeAttribute("aria-invalid");
      const input = field && form.querySelector(`[name="${CSS.escape(field)}"]`);
      if (input) {
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", "e3-error");
        input.focus();
      }
    };
    const ms = (v) => (v === null || v === undefined ? "" : v.toFixed(3) + " ms");

    const drawHistogram = (rtts) => {
      const svg = document.getElementById("e3-histogram");
      svg.replaceChildren();
      if (rtts.length === 0) return;
      const w = 600, h = 200, left = 40, bottom = 24, bins = Math.min(40, Math.max(5, Math.ceil(Math.sqrt(rtts.length))));
      const lo = Math.min(...rtts), hi = Math.max(...rtts);
      const width = (hi - lo) / bins || 1;
      const counts = new Array(bins).fill(0);
      for (const r of rtts) counts[Math.min(bins - 1, Math.floor((r - lo) / width))]++;
      const most = Math.max(...counts);
      const bw = (w - left - 10) / bins;
      counts.forEach((c, i) => {
        const bh = ((h - bottom - 10) * c) / most;
        svg.append(svgNode("rect", { x: left + i * bw, y: h - bottom - bh, width: Math.max(1, bw - 1), height: bh, fill: "#2454a6" }));
      });
      svg.append(svgNode("text", { x: left, y: h - 6 }, lo.toFixed(3) + " ms"));
      svg.append(svgNode("text", { x: w - 80, y: h - 6 }, hi.toFixed(3) + " ms"));
      svg.append(svgNode("text", { x: 2, y: 14 }, String(most)));
    };

    const show = (result) => {
      current = result;
      const rtts = result.rttsInMilliseconds || [];
      document.getElementById("e3-title").textContent = "Result: " + (result.label || "experiment");
      document.getElementById("e3-count").textContent = String(rtts.length + (result.failures || 0));
      document.getElementById("e3-failures").textContent = String(result.failures || 0);
      document.getElementById("e3-mean").textContent = ms(result.mean);
      document.getElementById("e3-median").textContent = ms(result.median);
      document.getElementById("e3-stddev").textContent = ms(result.standardDeviation);
      const list = document.getElementById("e3-rtts");
      list.replaceChildren(...rtts.map((r) => node("li", r.toFixed(3))));
      drawHistogram(rtts);
      if (jsonUrl) URL.revokeObjectURL(jsonUrl);
      jsonUrl = URL.createObjectURL(new Blob([JSON.stringify(result, null, 2)], { type: "application/json" }));
      const download = document.getElementById("e3-download");
      download.href = jsonUrl;
      download.download = (result.label || "experiment").replace(/[^A-Za-z0-9._-]+/g, "-") + ".json";
      document.getElementById("e3-analysis").hidden = true;
      section.hidden = false;
    };

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      errorBox.hidden = true;
      const value = (id) => Number(document.getElementById(id).value);
      const body = {
        interactions: value("e3-requests"),
        batchSize: value("e3-group"),
        intervalBetweenBatchesInMilliseconds: value("e3-interval"),
        allowedOperations: [...form.querySelectorAll('input[name="allowedOperations"]:checked')].map((i) => i.value),
      };
      const button = document.getElementById("e3-run");
      button.disabled = true;
      button.textContent = "Running…";
      try {
        const response = await fetch("/api/e3/experiment", {
          method: "POST",
          headers: { "content-type": "application/json", "x-csrf-token": csrfToken() },
          body: JSON.stringify(body),
        });
        const answer = await response.json();
        if (!response.ok) {
          showError(answer.error, answer.field);
          return;
        }
        answer.label = document.getElementById("e3-label").value;
        show(answer);
      } catch (e) {
        showError("the server did not answer: " + e);
      } finally {
        button.disabled = false;
        button.textContent = "Run the experiment";
      }
    });

    document.getElementById("e3-load").addEventListener("change", async (event) => {
      errorBox.hidden = true;
      const file = event.target.files[0];
      if (!file) return;
      try {
        const result = JSON.parse(await file.text());
        if (!Array.isArray(result.rttsInMilliseconds)) {
          showError(`${file.name}: not an experiment result (no rttsInMilliseconds list)`);
          return;
        }
        show(result);
      } catch (e) {
        showError(`${file.name}: not JSON (${e.message})`);
      }
    });

    document.getElementById("e3-analyze").addEventListener("click", async () => {
      if (!current) return;
      const discard = document.getElementById("e3-discard").checked;
      const ask = (format) =>
        fetch(`/api/e3/analyze?discardFirst=${discard}&format=${format}`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-csrf-token": csrfToken() },
          body: JSON.stringify(current),
        });
      const response = await ask("json");
      const analysis = await response.json();
      if (!response.ok) {
        showError(analysis.error, analysis.field);
        return;
      }
      const csv = await (await ask("csv")).text();
      if (csvUrl) URL.revokeObjectURL(csvUrl);
      csvUrl = URL.createObjectURL(new Blob([csv], { type: "text/csv" }));
      const link = document.getElementById("e3-csv");
      link.href = csvUrl;
      link.download = ((current.label || "experiment").replace(/[^A-Za-z0-9._-]+/g, "-")) + "-analysis.csv";
      const rows = document.querySelector("#e3-stats tbody");
      rows.replaceChildren();
      const s = analysis.summary || {};
      const names = [["RTT90", "p90"], ["RTT95", "p95"], ["RTT99", "p99"], ["count", "count"], ["mean", "mean"],
        ["standard deviation", "std_dev"], ["min", "min"], ["Q1", "q1"], ["median", "median"], ["Q3", "q3"],
        ["max", "max"], ["p99.9", "p999"], ["max / p99", "max_over_p99"]];
      for (const [label, key] of names) {
        const row = node("tr");
        const v = s[key];
        const shown = v === undefined || v === null ? "" : key === "count" ? String(v) : key === "max_over_p99" ? v.toFixed(2) : v.toFixed(3);
        row.append(node("th", label), node("td", shown));
        row.firstChild.scope = "row";
        rows.append(row);
      }
      document.getElementById("e3-analysis").hidden = false;
    });
  }

  // ---- the new-run form: show the chosen profile's scenarios as a hint ----

  function profileHints() {
    const select = document.getElementById("profile");
    const scenarios = document.getElementById("scenarios");
    const placements = document.getElementById("placements");
    const edit = document.getElementById("edit-profile");
    const update = () => {
      const option = select.selectedOptions[0];
      if (!option) return;
      scenarios.placeholder = option.dataset.scenarios || "";
      placements.placeholder = option.dataset.placements || "";
      edit.href = `/runs/new?profile=${encodeURIComponent(option.value)}&edit=1`;
    };
    select.addEventListener("change", update);
    update();
  }

  document.addEventListener("DOMContentLoaded", () => {
    const section = document.getElementById("progress-section");
    if (section) watchProgress(section);
    if (document.getElementById("e3-form")) e3Client();
    if (document.getElementById("new-run")) profileHints();
  });
})();

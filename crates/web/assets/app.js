// openprof's web UI: hash routes drawn from the JSON API (docs/ui.md). The flame graph and call
// tree are the views' own page, in a frame; this script swaps its data for the live view and
// hears which frame was clicked (navigation by resource name).
"use strict";
(function () {
  const view = document.getElementById("view");
  // `flame`: the flame graph pane of the source shown ({ key, pane, timers, drawn }), kept
  // while only the tab changes: a frame put back into the document would load its page again.
  const state = { timers: [], frameName: null, flame: null };

  // ---- helpers -----------------------------------------------------------------------------
  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attributes || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "dataset") Object.assign(node.dataset, value);
      // Through the CSSOM: the page's policy refuses style attributes.
      else if (key === "style") node.style.cssText = String(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.appendChild(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
    }
    return node;
  }
  function say(text, isError) {
    const box = document.getElementById("message");
    box.textContent = text;
    box.className = isError ? "error" : "";
    box.hidden = false;
    clearTimeout(say.timer);
    say.timer = setTimeout(() => { box.hidden = true; }, isError ? 8000 : 3000);
  }
  async function api(path, options) {
    const init = Object.assign({ credentials: "same-origin" }, options || {});
    if (init.body !== undefined) {
      init.method = init.method || "POST";
      init.headers = { "Content-Type": "application/json" };
      init.body = JSON.stringify(init.body);
    }
    const response = await fetch(path, init);
    if (response.status === 401) { window.location = "/login"; throw new Error("logged out"); }
    const text = await response.text();
    let body;
    try { body = text ? JSON.parse(text) : {}; } catch (e) { body = { error: text }; }
    if (!response.ok) {
      const error = new Error(body.error || body.message || ("HTTP " + response.status));
      error.body = body;
      error.status = response.status;
      throw error;
    }
    return body;
  }
  function query(params) {
    const search = new URLSearchParams();
    for (const [key, value] of Object.entries(params)) {
      if (value === undefined || value === null || value === "" || value === false) continue;
      if (Array.isArray(value)) value.forEach((one) => search.append(key, one));
      else search.append(key, value === true ? "1" : String(value));
    }
    return search.toString();
  }
  function bytes(value) {
    const units = ["B", "KiB", "MiB", "GiB"];
    let at = 0;
    while (value >= 1024 && at < units.length - 1) { value /= 1024; at++; }
    return (at ? value.toFixed(1) : String(value)) + " " + units[at];
  }
  function number(value) { return Number(value).toLocaleString("en"); }
  function stopTimers() { state.timers.forEach(clearInterval); state.timers = []; }
  function dropFlame() {
    if (state.flame) state.flame.timers.forEach(clearInterval);
    state.flame = null;
  }
  function table(heads, rows, id) {
    return el("table", { class: "grid", id },
      el("thead", {}, el("tr", {}, heads.map((head) => el("th", { class: head.num ? "num" : null }, head.label || head)))),
      el("tbody", {}, rows));
  }
  function cell(value, numeric) { return el("td", { class: numeric ? "num" : null }, value); }

  // ---- fleet -------------------------------------------------------------------------------
  async function showFleet() {
    const filter = el("input", { type: "search", id: "fleet-filter", size: 52, placeholder: "Filter: host, pid, agent id, format, label:NAME=VALUE" });
    const problem = el("span", { class: "error", id: "fleet-filter-error" });
    const holder = el("div", {});
    view.replaceChildren(el("h2", {}, "Fleet"), el("div", { class: "controls" }, filter, problem), holder);
    // A click on a label adds it to the filter (every term must match).
    const filterBy = (name, value) => {
      const term = "label:" + name + "=" + value;
      const terms = filter.value.trim().split(/\s+/).filter((word) => word);
      if (!terms.includes(term)) filter.value = terms.concat(term).join(" ");
      draw().catch((error) => say(error.message, true));
    };
    const chips = (labels) => (labels || []).map((label) => el("button", { type: "button", class: "chip", title: "show the agents labelled " + label.name + "=" + label.value,
      dataset: { name: label.name, value: label.value }, onclick: () => filterBy(label.name, label.value) }, label.name + "=" + label.value));
    const draw = async () => {
      let fleet;
      try {
        fleet = await api("/api/fleet?" + query({ filter: filter.value.trim() }));
      } catch (error) {
        // A filter the API refuses is named beside it; the table stays as it was.
        if (error.status === 400) { problem.textContent = error.message; return; }
        throw error;
      }
      problem.textContent = "";
      const rows = fleet.agents.map((agent) => {
        const status = agent.connected ? el("span", { class: "status connected" }, "connected")
          : el("span", { class: "status gone" }, agent.finished ? "finished" : "disconnected");
        const gaps = agent.traces.reduce((sum, trace) => sum + trace.gaps.length, 0);
        return el("tr", { dataset: { agent: agent.agent } },
          cell(el("a", { href: "#/agent/" + agent.agent, class: "agent-link" }, agent.hostname + " pid " + agent.pid)),
          cell(agent.process && agent.process.name ? agent.process.name : ""),
          el("td", { class: "labels" }, chips(agent.labels)),
          cell(agent.format),
          cell(status),
          cell(agent.clock ? (agent.clock.offsetNs / 1e6).toFixed(3) + " ± " + (agent.clock.errorNs / 1e6).toFixed(3) + " ms" : "—"),
          cell(number(agent.frames), true),
          cell(bytes(agent.bytes), true),
          cell(agent.lostFrames ? el("span", { class: "status warn" }, number(agent.lostFrames) + " lost") : "0", true),
          cell(gaps ? el("span", { class: "status warn" }, gaps + " gaps") : "0", true),
          cell(agent.traces.map((trace) => el("a", { href: "#/trace/" + trace.trace, class: "trace-link" }, trace.trace.slice(0, 8) + " (" + number(trace.elements) + ")"))));
      });
      holder.replaceChildren(
        fleet.agents.length ? table(["Agent", "Process", "Labels", "Format", "Status", "Clock offset", { label: "Frames", num: 1 }, { label: "Bytes", num: 1 }, { label: "Losses", num: 1 }, { label: "Gaps", num: 1 }, "Traces"], rows, "fleet")
          : el("p", { class: "muted", id: "fleet-empty" }, filter.value.trim() ? "No agent matches the filter." : "No agent has sent anything yet."),
        el("p", { class: "muted" }, fleet.collector ? "Live: a collector runs with this UI." : "A store only: no agent is live (openprof ui)."));
    };
    filter.addEventListener("input", () => draw().catch((error) => say(error.message, true)));
    await draw();
    state.timers.push(setInterval(() => draw().catch(() => {}), 3000));
  }

  // ---- one agent or trace --------------------------------------------------------------------
  function sourceOf(kind, id) { return kind === "agent" ? { agent: id } : kind === "trace" ? { trace: id } : { snapshot: id }; }

  // A source's heading, tabs and panes. The flame graph's pane is made once per source and
  // only hidden while another tab shows: back on its tab, the page is there as it was left
  // (zoom, search, live updates); the other tabs are drawn anew each time.
  async function showSource(kind, id, tab) {
    const source = sourceOf(kind, id);
    const key = kind + "/" + id;
    if (!(state.flame && state.flame.key === key && state.flame.pane.isConnected)) {
      dropFlame();
      const heading = el("h2", { id: "source-title" }, kind + " " + id);
      const tabs = el("div", { class: "tabs", role: "tablist", id: "source-tabs" });
      const names = [["flame", "Flame graph"], ["methods", "Hot methods"], ["statistics", "Statistics"], ["mpt", "Parameter values"]];
      if (kind === "agent") names.push(["snapshot", "Snapshot"], ["controls", "Controls"]);
      for (const [name, label] of names) {
        tabs.appendChild(el("button", { id: "tab-" + name, role: "tab",
          onclick: () => { window.location.hash = "#/" + kind + "/" + id + "/" + name; } }, label));
      }
      const pane = el("div", { id: "flame-pane", hidden: true });
      view.replaceChildren(heading, tabs, pane, el("div", { id: "tab-body" }));
      state.flame = { key, pane, timers: [], drawn: false };
    }
    const infoComing = kind !== "agent" ? Promise.resolve(null)
      : api("/api/fleet?" + query({ filter: id })).then((fleet) => {
        const info = fleet.agents.find((agent) => agent.agent === id) || null;
        if (info) document.getElementById("source-title").textContent = info.hostname + " pid " + info.pid + " (" + (info.connected ? "connected" : info.finished ? "finished" : "disconnected") + ")";
        return info;
      });
    const draws = { methods: drawMethods, statistics: drawStatistics, mpt: drawMpt, snapshot: drawSnapshot, controls: drawControls };
    const shown = draws[tab] ? tab : "flame";
    for (const button of document.getElementById("source-tabs").children) {
      button.setAttribute("aria-selected", String(button.id === "tab-" + shown));
    }
    const flame = state.flame;
    const body = document.getElementById("tab-body");
    flame.pane.hidden = shown !== "flame";
    body.hidden = shown === "flame";
    body.replaceChildren();
    if (shown !== "flame") {
      await draws[shown](body, kind, id, source, await infoComing);
    } else if (!flame.drawn) {
      flame.drawn = true;
      await drawFlame(flame.pane, kind, id, source, infoComing, flame.timers);
    } else {
      await infoComing;
    }
  }

  // The flame graph: the views' page in a frame, loaded with what is stored as soon as the
  // agent's status says there is something; for a live agent, its data is then swapped for a
  // fresh dump's, and (live checked) as the agent dumps.
  async function drawFlame(body, kind, id, source, infoComing, timers) {
    const event = el("input", { id: "flame-event", placeholder: "event (default: the first)", size: 14 });
    const include = el("input", { id: "flame-include", placeholder: "include regex" });
    const exclude = el("input", { id: "flame-exclude", placeholder: "exclude regex" });
    const threads = el("input", { type: "checkbox", id: "flame-threads" });
    const live = el("input", { type: "checkbox", id: "live", disabled: true });
    const count = el("span", { id: "live-count", class: "muted" });
    const frame = el("iframe", { class: "flame", id: "flame-frame", title: "flame graph" });
    const params = () => Object.assign({}, source, { event: event.value.trim(), include: include.value.trim() ? [include.value.trim()] : [], exclude: exclude.value.trim() ? [exclude.value.trim()] : [], threads: threads.checked });
    const load = () => { frame.src = "/view/flame?" + query(params()); };
    const apply = el("button", { type: "button", id: "flame-apply", onclick: load }, "Show");
    body.replaceChildren(el("div", { class: "controls" },
      el("label", {}, "Event ", event), el("label", {}, "Include ", include), el("label", {}, "Exclude ", exclude),
      el("label", {}, threads, " per thread"), apply,
      kind === "agent" ? el("label", { title: "the agent dumps what it sampled every few seconds" }, live, " live") : null, count), frame);
    frame.addEventListener("load", () => {
      const total = frame.contentDocument && frame.contentDocument.getElementById("total");
      if (total) count.textContent = total.textContent;
    });
    // The page loaded (its script run), now or when its frame says so.
    const pageReady = () => new Promise((resolve) => {
      const win = frame.contentWindow;
      if (win && win.openprofReplace && frame.contentDocument.readyState === "complete") resolve();
      else frame.addEventListener("load", resolve, { once: true });
    });
    // Newer data into the page in place: its zoom, search and event stay.
    const swap = async () => {
      const data = await api("/api/profile?" + query(params()));
      await pageReady();
      frame.contentWindow.openprofReplace(data);
      const total = frame.contentDocument && frame.contentDocument.getElementById("total");
      count.textContent = total ? total.textContent : "";
      count.dataset.total = total ? total.dataset.total : "";
    };
    // `data-state` on the count: "ready" once the page shows what the agent had when it opened.
    count.dataset.state = "loading";
    const info = await infoComing;
    live.disabled = !(info && info.connected);
    let lastSequence = info ? info.lastSequence : 0;
    // What is stored shows at once; an agent that stored nothing yet is waited for.
    const loaded = kind !== "agent" || lastSequence > 0;
    if (loaded) load();
    // A live agent writes its HPROF output at dumps: ask for one, and swap it in when it comes.
    if (info && info.connected && info.format !== "x") {
      count.textContent = "asking the agent for its samples…";
      for (let tries = 0; tries < 20; tries++) {
        const status = await api("/api/agents/" + id + "/live", { method: "POST", body: {} });
        if (status.lastSequence > lastSequence || (lastSequence > 0 && tries > 0)) {
          if (status.lastSequence > lastSequence) {
            lastSequence = status.lastSequence;
            if (loaded) await swap();
          }
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 500));
      }
    }
    if (!loaded) load();
    count.dataset.state = "ready";
    const tick = async () => {
      if (!live.checked) return;
      const status = await api("/api/agents/" + id + "/live", { method: "POST", body: {} });
      if (status.lastSequence === lastSequence) return;
      lastSequence = status.lastSequence;
      await swap();
    };
    timers.push(setInterval(() => tick().catch((error) => say(error.message, true)), 2000));
  }

  async function drawMethods(body, kind, id, source) {
    const event = el("input", { id: "methods-event", placeholder: "event", size: 14 });
    const holder = el("div", {});
    const draw = async () => {
      const result = await api("/api/methods?" + query(Object.assign({}, source, { event: event.value.trim() })));
      const rows = result.methods.map((method) => el("tr", { dataset: { name: method.name } },
        cell(el("a", { href: "#", class: "resource-link", onclick: (e) => { e.preventDefault(); showResource(source, method.name); } }, method.name)),
        cell(number(method.self), true), cell(result.total ? (100 * method.self / result.total).toFixed(2) + " %" : "", true),
        cell(number(method.total), true), cell(result.total ? (100 * method.total / result.total).toFixed(2) + " %" : "", true)));
      holder.replaceChildren(el("p", { class: "muted" }, "Event " + result.event + " of " + result.events.join(", ") + "; total " + number(result.total)),
        table(["Method", { label: "Self", num: 1 }, { label: "Self %", num: 1 }, { label: "Total", num: 1 }, { label: "Total %", num: 1 }], rows, "methods"));
    };
    body.replaceChildren(el("div", { class: "controls" }, el("label", {}, "Event ", event), el("button", { type: "button", onclick: () => draw().catch((e) => say(e.message, true)) }, "Show")), holder);
    await draw();
  }

  async function drawMpt(body, kind, id, source, info) {
    const holder = el("div", { id: "mpt" });
    const detail = el("div", { id: "mpt-detail" });
    body.replaceChildren(el("p", { class: "muted" }, "Click a value for its calls over time and the profile of its calls."), holder, detail);
    const live = kind === "agent" && info && info.connected && info.format !== "x";
    const draw = async () => {
      // A live agent writes its figures at dumps: ask for one (shown at the next drawing).
      if (live) api("/api/agents/" + id + "/live", { method: "POST", body: {} }).catch(() => {});
      const result = await api("/api/mpt?" + query(source));
      if (!result.methods.length) {
        holder.replaceChildren(el("p", { class: "muted", id: "mpt-empty" }, "No method parameter tracing data yet (add a specification under Controls, or run the agent with mpt=@FILE)."));
        return;
      }
      holder.replaceChildren(...result.methods.map((method) => el("div", { class: "panel mpt-method", dataset: { method: method.method } },
        el("h3", {}, method.method, " ", el("code", {}, method.spec)),
        table(["Value", { label: "Calls", num: 1 }, { label: "Mean wall ms", num: 1 }, { label: "Max wall ms", num: 1 }, { label: "Mean CPU ms", num: 1 }, { label: "CPU samples", num: 1 }],
          method.values.map((value) => el("tr", { dataset: { value: value.value }, class: "clickable", title: "its calls over time and their profile",
            onclick: () => showValue(detail, source, method, value).catch((error) => say(error.message, true)) },
          cell(value.value), cell(number(value.calls), true),
          cell(value.wallMeanMs.toFixed(3), true), cell(value.wallMaxMs.toFixed(3), true), cell(value.cpuMeanMs.toFixed(3), true),
          cell(number(value.cpuSamples), true)))))));
    };
    await draw().catch((error) => holder.replaceChildren(el("p", { class: "error" }, error.message)));
    state.timers.push(setInterval(() => draw().catch(() => {}), 3000));
  }

  // One traced value: its calls over time, and the flame graph of the samples taken inside them.
  async function showValue(detail, source, method, value) {
    const selected = { method: method.method, spec: method.spec, value: value.value };
    const over = await api("/api/mpt/calls?" + query(Object.assign({}, source, selected)));
    const panel = el("div", { class: "panel", id: "mpt-value", dataset: selected },
      el("h3", {}, method.method, " ", el("code", {}, method.spec), " = ", el("strong", {}, value.value)),
      el("h4", {}, over.exact ? "Its calls over time (each call, by when it began)" : "Its calls over time (per dump of the agent)"),
      callsChart(over.points),
      table([{ label: "Seconds", num: 1 }, { label: "Calls", num: 1 }, { label: "Mean wall ms", num: 1 }, { label: "Max wall ms", num: 1 }],
        over.points.map((point) => el("tr", {}, cell(point.t.toFixed(3), true), cell(number(point.calls), true),
          cell(point.wallMeanMs == null ? "" : point.wallMeanMs.toFixed(3), true), cell(point.wallMaxMs == null ? "" : point.wallMaxMs.toFixed(3), true))), "mpt-calls"));
    const events = [];
    if (value.cpuSamples) events.push(["mpt_cpu", "CPU profile of its calls (" + number(value.cpuSamples) + " samples)"]);
    if (value.wallSamples) events.push(["mpt_wall", "Wall-clock profile of its calls (" + number(value.wallSamples) + " samples)"]);
    if (!events.length) {
      panel.appendChild(el("p", { class: "muted", id: "mpt-no-samples" }, "No samples fell inside these calls: the agent tags its samples with the call they fall in when it samples (cpu=samples, wall=); a trace carries no samples."));
    } else {
      const frame = el("iframe", { class: "flame", id: "mpt-flame", title: "profile of the value's calls" });
      const labels = ["mpt.method=" + method.method, "mpt.spec=" + method.spec, "mpt.value=" + value.value];
      const show = (event) => { frame.src = "/view/flame?" + query(Object.assign({}, source, { event, label: labels })); };
      panel.appendChild(el("div", { class: "controls" }, events.map(([event, label]) => el("button", { type: "button", id: "show-" + event, onclick: () => show(event) }, label))));
      panel.appendChild(frame);
      show(events[0][0]);
    }
    detail.replaceChildren(panel);
  }

  // Bars of calls per point, and the mean wall time of each as a dot, on one time axis.
  function callsChart(points) {
    const svgNs = "http://www.w3.org/2000/svg";
    const svg = (tag, attributes, ...children) => {
      const node = document.createElementNS(svgNs, tag);
      for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
      children.forEach((child) => node.appendChild(typeof child === "string" ? document.createTextNode(child) : child));
      return node;
    };
    const width = 640, height = 160, left = 40, bottom = 20;
    const chart = svg("svg", { id: "mpt-chart", width, height, viewBox: "0 0 " + width + " " + height, role: "img" });
    if (!points.length) return el("p", { class: "muted", id: "mpt-calls-empty" }, "No call with this value has ended yet.");
    const lastT = Math.max(...points.map((point) => point.t)) || 1;
    const mostCalls = Math.max(...points.map((point) => point.calls)) || 1;
    const longest = Math.max(...points.map((point) => point.wallMeanMs || 0)) || 1;
    const plot = width - left - 10;
    const bar = Math.max(2, Math.min(40, plot / points.length - 2));
    const x = (t) => left + (plot - bar) * t / lastT;
    chart.appendChild(svg("title", {}, "calls (bars) and mean wall ms (dots) over seconds"));
    chart.appendChild(svg("line", { x1: left, y1: height - bottom, x2: width, y2: height - bottom, stroke: "#888" }));
    chart.appendChild(svg("text", { x: 2, y: 12, "font-size": 10, fill: "#555" }, mostCalls + " calls"));
    chart.appendChild(svg("text", { x: width - 90, y: 12, "font-size": 10, fill: "#b04" }, longest.toFixed(1) + " ms mean"));
    chart.appendChild(svg("text", { x: width - 40, y: height - 4, "font-size": 10, fill: "#555" }, lastT.toFixed(1) + " s"));
    for (const point of points) {
      const h = (height - bottom - 20) * point.calls / mostCalls;
      chart.appendChild(svg("rect", { class: "calls", x: x(point.t), y: height - bottom - h, width: bar, height: h, fill: "#6a9fd8" }));
      if (point.wallMeanMs != null) {
        chart.appendChild(svg("circle", { class: "mean", cx: x(point.t) + bar / 2, cy: height - bottom - (height - bottom - 20) * point.wallMeanMs / longest, r: 3, fill: "#b04" }));
      }
    }
    return chart;
  }

  async function drawSnapshot(body, kind, id) {
    const name = el("input", { id: "snapshot-name", placeholder: "snapshot name", required: true });
    const take = el("button", { type: "button", id: "snapshot-take", onclick: async () => {
      try {
        const snapshot = await api("/api/snapshots", { body: { agent: id, name: name.value } });
        say("Snapshot " + snapshot.name + " taken");
        window.location.hash = "#/snapshots";
      } catch (error) { say(error.message, true); }
    } }, "Take snapshot");
    body.replaceChildren(el("p", {}, "A snapshot holds what the agent sampled since its previous snapshot (or its start), so that two snapshots compare two phases."),
      el("div", { class: "controls" }, name, take));
  }

  // Controls of a live agent: each command confirmed, then sent through the collector.
  async function drawControls(body, kind, id) {
    const commands = [
      ["dump", "Dump what it sampled (CPU, wall, locks, allocations)"], ["cpu-samples", "Dump CPU samples"],
      ["cpu-sampling-on", "CPU sampling on"], ["cpu-sampling-off", "CPU sampling off"], ["clear-cpu-samples", "Clear CPU samples"],
      ["depth", "Stack depth (argument: a number)"], ["interval", "CPU sampling interval (argument: milliseconds)"], ["trace-start", "Start a trace"], ["trace-end", "End the trace"],
      ["alloc-sites", "Dump allocation sites"], ["dump-heap", "Dump the heap"], ["gc", "Run the garbage collector"],
      ["mpt-add", "Add parameter tracing specifications (argument: one a line)"], ["mpt-remove", "Remove specifications"], ["mpt-list", "List specifications"],
    ];
    const select = el("select", { id: "command" }, commands.map(([value, label]) => el("option", { value }, label)));
    const argument = el("textarea", { id: "argument", rows: 3, cols: 60, placeholder: "argument: a depth, or MPT specifications (docs/mpt.md)" });
    const result = el("pre", { id: "command-result", class: "panel" });
    const send = el("button", { type: "button", id: "send", onclick: async () => {
      const what = select.value + (argument.value.trim() ? " " + argument.value.trim() : "");
      if (!window.confirm("Send '" + what + "' to agent " + id + "?")) return;
      try {
        const outcome = await api("/api/agents/" + id + "/command", { body: { command: select.value, argument: argument.value } });
        result.textContent = "done: " + outcome.message;
        result.className = "panel";
      } catch (error) {
        result.textContent = "refused: " + error.message;
        result.className = "panel error";
      }
    } }, "Send");
    body.replaceChildren(el("div", { class: "controls" }, select, send), argument, result,
      el("p", { class: "muted" }, "Each command is confirmed, then logged with your name (see Actions)."));
  }

  // ---- statistics ---------------------------------------------------------------------------
  function ms(nanos) { return nanos === undefined || nanos === null ? "" : (nanos / 1e6).toFixed(3); }
  function pct(value) { return value === undefined || value === null ? "" : Number(value).toFixed(2) + " %"; }
  function nameLink(source, name) {
    return el("a", { href: "#", class: "resource-link", onclick: (e) => { e.preventDefault(); showResource(source, name); } }, name);
  }
  // A table of weighted rows (self and total): methods, packages, components, related resources.
  function weightedTable(source, rows, id, extra) {
    const heads = ["Name", { label: "Self", num: 1 }, { label: "Self %", num: 1 }, { label: "Total", num: 1 }, { label: "Total %", num: 1 }].concat((extra || []).map((column) => ({ label: column[0], num: 1 })));
    return table(heads, rows.map((row) => el("tr", { dataset: { name: row.name } },
      cell(row.kind === "thread" || !source ? row.name + (row.thread_id !== undefined ? " (" + row.thread_id + ")" : "") : nameLink(source, row.name)),
      cell(number(row.self_value), true), cell(pct(row.self_percent), true), cell(number(row.total_value), true), cell(pct(row.total_percent), true),
      (extra || []).map((column) => cell(column[1](row), true)))), id);
  }

  async function drawStatistics(body, kind, id, source) {
    const which = el("select", { id: "stats-kind" }, ["methods", "allocations", "threads", "components"].map((name) => el("option", { value: name }, name)));
    const event = el("input", { id: "stats-event", placeholder: "event", size: 12 });
    const map = el("textarea", { id: "component-map", rows: 3, cols: 50, placeholder: "component map, one rule a line: NAME = a.b.*, c.d" });
    const holder = el("div", { id: "stats" });
    const draw = async () => {
      const params = Object.assign({}, source, { kind: which.value, event: event.value.trim(), components: which.value === "components" ? map.value : "" });
      const result = await api("/api/statistics?" + query(params));
      if (which.value === "methods") {
        holder.replaceChildren(el("p", { class: "muted" }, "Event " + result.event + " (" + result.unit + "), total " + number(result.total_value)),
          weightedTable(source, result.methods.slice(0, 300), "stats-methods", [
            ["Calls", (row) => row.calls ? number(row.calls.calls) : ""],
            ["Mean ms", (row) => row.calls && row.calls.wall ? ms(row.calls.wall.mean_ns) : ""],
            ["Min ms", (row) => row.calls && row.calls.wall ? ms(row.calls.wall.min_ns) : ""],
            ["Max ms", (row) => row.calls && row.calls.wall ? ms(row.calls.wall.max_ns) : ""],
            ["CPU mean ms", (row) => row.calls && row.calls.cpu ? ms(row.calls.cpu.self_mean_ns) : ""]]));
      } else if (which.value === "allocations") {
        const alloc = (rows, key, id) => table([key === "class" ? "Class" : key === "method" ? "Method" : "Site", { label: "Allocated", num: 1 }, { label: "%", num: 1 }, { label: "Objects", num: 1 }, { label: "Live", num: 1 }, { label: "Live objects", num: 1 }],
          rows.slice(0, 200).map((row) => el("tr", { dataset: { name: row.class || row.method } }, cell(key === "site" ? row.class + " in " + row.method : nameLink(source, row[key])),
            cell(bytes(row.alloc_bytes || 0), true), cell(pct(row.alloc_bytes_percent), true), cell(number(row.alloc_objects || 0), true), cell(bytes(row.live_bytes || 0), true), cell(number(row.live_objects || 0), true))), id);
        holder.replaceChildren(el("h3", {}, "By class"), alloc(result.by_class, "class", "stats-alloc-class"), el("h3", {}, "By allocating method"), alloc(result.by_method, "method", "stats-alloc-method"), el("h3", {}, "By site"), alloc(result.by_site, "site", "stats-alloc-site"));
      } else if (which.value === "threads") {
        const rows = result.threads.threads.map((row) => el("tr", { dataset: { name: row.name } }, cell(nameLink(source, row.name)),
          cell(number(row.cpu_samples), true), cell(pct(row.cpu_percent), true), cell(number(row.wall_samples), true),
          cell(Object.entries(row.wall_states || {}).map(([state, count]) => state + " " + number(count)).join(", ")),
          cell(ms(row.lock_ns), true), cell(bytes(row.alloc_bytes || 0), true)));
        const timeline = result.timeline ? el("div", { class: "panel", id: "stats-timeline" }, el("h3", {}, "Over time (" + result.timeline.event + ", buckets of " + ms(result.timeline.bucket_ns) + " ms)"),
          ...result.timeline.threads.slice(0, 20).map((thread) => {
            const most = Math.max(1, ...thread.values);
            return el("div", { class: "bars", title: thread.name }, el("code", {}, thread.name.padEnd(24).slice(0, 24) + " "),
              ...thread.values.map((value) => el("span", { style: "width:" + Math.max(1, Math.round(300 / thread.values.length)) + "px;opacity:" + (0.15 + 0.85 * value / most).toFixed(2) })));
          })) : el("p", { class: "muted" }, "No sample times in this profile: no timeline.");
        holder.replaceChildren(table(["Thread", { label: "CPU samples", num: 1 }, { label: "CPU %", num: 1 }, { label: "Wall samples", num: 1 }, "Wall states", { label: "Lock ms", num: 1 }, { label: "Allocated", num: 1 }], rows, "stats-threads"), timeline);
      } else {
        const sections = [el("h3", {}, "By package"), weightedTable(source, result.packages.slice(0, 200), "stats-packages")];
        if (result.components && result.components.length) sections.push(el("h3", {}, "By component"), weightedTable(null, result.components, "stats-components"));
        if (result.loaders) sections.push(el("h3", {}, "By class loader"), weightedTable(null, result.loaders, "stats-loaders"));
        else if (result.loaders_note) sections.push(el("p", { class: "muted" }, result.loaders_note));
        holder.replaceChildren(...sections);
      }
    };
    const run = () => draw().catch((error) => holder.replaceChildren(el("p", { class: "error", id: "stats-error" }, error.message)));
    which.addEventListener("change", run);
    body.replaceChildren(el("div", { class: "controls" }, el("label", {}, "Statistic ", which), el("label", {}, "Event ", event),
      el("button", { type: "button", id: "stats-show", onclick: run }, "Show")), map, holder);
    await run();
  }

  // ---- navigation by resource name -------------------------------------------------------------
  // Every statistic about one method, class, package or thread, from the profile's index.
  async function showResource(source, name) {
    let panel = document.getElementById("resource");
    if (!panel) { panel = el("aside", { id: "resource" }); document.body.appendChild(panel); }
    const close = el("button", { class: "close", type: "button", onclick: () => panel.remove() }, "×");
    panel.replaceChildren(close, el("h3", {}, name), el("p", { class: "muted" }, "Loading…"));
    let stats;
    try {
      stats = await api("/api/statistics?" + query(Object.assign({}, source, { kind: "resource", name })));
    } catch (error) {
      panel.replaceChildren(close, el("h3", {}, name), el("p", { class: "error" }, error.message));
      return;
    }
    const related = (title, rows, id) => rows && rows.length ? [el("h4", {}, title), weightedTable(source, rows, id)] : [];
    const sections = [close, el("h3", { id: "resource-name" }, stats.resource.name), el("p", { class: "muted", id: "resource-kind" }, stats.resource.kind + (stats.parent ? " in " + stats.parent.name : "") + (stats.loader ? ", loader " + stats.loader : ""))];
    sections.push(...stats.events.map((event) => el("div", { class: "resource-event", dataset: { event: event.event } },
      el("strong", {}, event.event), ": total " + number(event.total_value) + " (" + pct(event.total_percent) + "), self " + number(event.self_value) + " (" + pct(event.self_percent) + ")")));
    if (stats.calls && stats.calls.wall) sections.push(el("p", {}, number(stats.calls.calls) + " calls, " + ms(stats.calls.wall.mean_ns) + " ms mean, " + ms(stats.calls.wall.min_ns) + " to " + ms(stats.calls.wall.max_ns) + " ms"));
    sections.push(...related("Callers", stats.callers, "resource-callers"), ...related("Callees", stats.callees, "resource-callees"),
      ...related("Contents", stats.contents, "resource-contents"), ...related("Threads", stats.threads, "resource-threads"),
      ...related("Allocations", stats.allocations, "resource-allocations"), ...related("Allocated by", stats.allocated_by, "resource-allocated-by"),
      ...related("Waiting for its locks", stats.lock_waiters, "resource-lock-waiters"));
    for (const table of stats.mpt || []) {
      sections.push(el("h4", {}, "Parameter values: " + table.spec), el("ul", {}, table.values.map((value) => el("li", {}, value.value + ": " + number(value.calls) + " calls, " + ms(value.wall_mean_ns) + " ms mean"))));
    }
    panel.replaceChildren(...sections);
  }
  window.addEventListener("message", (event) => {
    if (event.origin !== window.location.origin || !event.data || !event.data.openprofFrame) return;
    const match = window.location.hash.match(/^#\/(agent|trace|snapshot)\/([0-9a-f-]+)/);
    if (match) showResource(sourceOf(match[1], match[2]), event.data.openprofFrame).catch((error) => say(error.message, true));
  });

  // ---- the fleet's profile, from ClickHouse -----------------------------------------------------
  // The windows agents in continuous mode send, summed in ClickHouse for the agents, samples and
  // time asked for: the flame graph page in a frame (with "compare", the differential page
  // against the same time that many seconds earlier) and the top methods of each time bucket;
  // then what counts calls rather than samples, for the same agents and time: method parameter
  // tracing's values (HPROF text agents) and the calls per method of the agents' traces.
  async function showFleetProfile() {
    const heading = el("h2", {}, "Fleet profile (ClickHouse)");
    const session = await sessionComing;
    if (!session.clickhouse) {
      view.replaceChildren(heading, el("p", { class: "muted", id: "fp-absent" },
        "This collector forwards no windows to ClickHouse: start it with openprof serve --clickhouse URL (docs/clickhouse.md)."));
      return;
    }
    const service = el("input", { id: "fp-service", placeholder: "service", size: 14 });
    const labels = el("input", { id: "fp-labels", placeholder: "agent labels: team:pay zone:eu", size: 28 });
    const event = el("select", { id: "fp-event" }, (session.fleetEvents || ["cpu"]).map((name) => el("option", { value: name }, name)));
    const seconds = el("input", { id: "fp-seconds", type: "number", min: 1, value: 900, size: 7 });
    const compare = el("input", { id: "fp-compare", type: "number", min: 1, placeholder: "none", size: 8,
      title: "a differential flame graph against the same time this many seconds earlier" });
    const sampleLabels = el("textarea", { id: "fp-sample-labels", rows: 2, cols: 60,
      placeholder: "sample labels, one a line: user=alice, or Shop.lookup(java.lang.String) 1=slow" });
    const bucket = el("input", { id: "fp-bucket", type: "number", min: 1, value: 60, size: 6 });
    const top = el("input", { id: "fp-top", type: "number", min: 1, max: 100, value: 5, size: 4 });
    const method = el("input", { id: "fp-method", size: 40, placeholder: "every method, or package.Class.method(types)",
      title: "the traced values of this method only" });
    const callsTop = el("input", { id: "fp-calls-top", type: "number", min: 1, max: 100, value: 20, size: 4 });
    // `data-state` on the status: "loading", then "ready" or "failed" once the frame and the table are there.
    const status = el("span", { id: "fp-status", class: "muted" });
    const problem = el("p", { class: "error", id: "fp-error", hidden: true });
    const frame = el("iframe", { class: "flame", id: "fp-frame", title: "the fleet's flame graph", hidden: true });
    const topHolder = el("div", { id: "fp-top-holder" });
    const valuesHolder = el("div", { id: "fp-values-holder" });
    const callsHolder = el("div", { id: "fp-calls-holder" });
    // The agents and the time: what the routes of calls take (they count no samples).
    const agents = () => ({
      service: service.value.trim(),
      label: labels.value.split(/[\s,]+/).filter((label) => label),
      seconds: seconds.value.trim(),
    });
    const params = () => Object.assign(agents(), {
      sample_label: sampleLabels.value.split("\n").map((label) => label.trim()).filter((label) => label),
      event: event.value,
    });
    const ms = (value) => Number(value).toFixed(3);
    // Values are the application's data: text nodes only (el), never HTML.
    const drawValues = async () => {
      const result = await api("/api/fleet/values?" + query(Object.assign(agents(), { method: method.value.trim() })));
      const rows = result.values.map((value) => el("tr", { dataset: { method: value.method, spec: value.spec, type: value.type, value: value.value,
        calls: value.calls, wallMean: value.wallMeanMs, cpuMean: value.cpuMeanMs } },
      el("td", { class: "wrap" }, value.method), el("td", { class: "wrap" }, value.spec), cell(value.type), cell(el("code", {}, value.value)), cell(number(value.calls), true),
      cell(ms(value.wallMeanMs), true), cell(ms(value.wallMaxMs), true), cell(ms(value.cpuMeanMs), true)));
      valuesHolder.replaceChildren(el("h3", {}, "Traced values (method parameter tracing, summed over windows and agents; most wall time first)"),
        rows.length ? table(["Method", "Specification", "Type", "Value", { label: "Calls", num: 1 }, { label: "Wall mean ms", num: 1 },
          { label: "Wall max ms", num: 1 }, { label: "CPU mean ms", num: 1 }], rows, "fleet-values")
          : el("p", { class: "muted", id: "fp-values-empty" }, "No traced values in this time: HPROF text agents (format=a) with mpt= record them."));
    };
    const drawCalls = async () => {
      const result = await api("/api/fleet/calls?" + query(Object.assign(agents(), { top: callsTop.value.trim() })));
      const most = Math.max(1, ...result.methods.map((row) => row.calls));
      const rows = result.methods.map((row) => el("tr", { dataset: { method: row.method, calls: row.calls } },
        cell(row.method), cell(number(row.calls), true),
        el("td", { class: "bars" }, el("span", { style: "width:" + Math.max(1, Math.round(200 * row.calls / most)) + "px" }))));
      callsHolder.replaceChildren(el("h3", {}, "Calls from traces (methodEntry elements counted, most first)"),
        rows.length ? table(["Method", { label: "Calls", num: 1 }, ""], rows, "fleet-calls")
          : el("p", { class: "muted", id: "fp-calls-empty" }, "No calls in this time: agents writing traces (format=x, cpu=times) record them."));
    };
    const drawTop = async () => {
      const result = await api("/api/fleet/top?" + query(Object.assign(params(), { bucket: bucket.value.trim(), top: top.value.trim() })));
      // Below a bucket's top: what its other methods weigh together, so no bucket looks lighter than it was.
      const othersOf = (one) => one.total - one.methods.reduce((sum, method) => sum + method.value, 0);
      const most = Math.max(1, ...result.buckets.flatMap((one) => one.methods.map((method) => method.value).concat([othersOf(one)])));
      const bar = (value) => el("td", { class: "bars" }, el("span", { style: "width:" + Math.max(1, Math.round(200 * value / most)) + "px" }));
      const rows = result.buckets.flatMap((one) => {
        const others = othersOf(one);
        return one.methods.map((method, rank) => el("tr", { dataset: { time: one.time, method: method.method, value: method.value } },
          cell(rank === 0 ? one.time : ""), cell(method.method), cell(number(method.value), true), bar(method.value)))
          .concat(others > 0 ? [el("tr", { class: "muted", dataset: { time: one.time, others: others } },
            cell(one.methods.length ? "" : one.time), cell("(other methods)"), cell(number(others), true), bar(others))] : []);
      });
      topHolder.replaceChildren(el("h3", {}, "Top methods over time (" + result.event + ", by self weight, buckets of " + result.bucketSeconds + " s)"),
        rows.length ? table(["From (UTC)", "Method", { label: result.event, num: 1 }, ""], rows, "fleet-top")
          : el("p", { class: "muted", id: "fp-top-empty" }, "No windows in this time."));
    };
    const load = async () => {
      status.dataset.state = "loading";
      status.textContent = "asking ClickHouse…";
      problem.hidden = true;
      const framed = new Promise((resolve) => frame.addEventListener("load", resolve, { once: true }));
      frame.hidden = false;
      frame.src = "/view/fleet/flame?" + query(Object.assign(params(), { compare: compare.value.trim() }));
      // Each table says nothing when its question fails; the failure is said beside the form.
      const drawn = (draw, holder) => draw().then(() => null, (error) => { holder.replaceChildren(); return error.message; });
      const tabled = Promise.all([drawn(drawTop, topHolder), drawn(drawValues, valuesHolder), drawn(drawCalls, callsHolder)]);
      await framed;
      // A refusal (a bad parameter, no windows) comes as JSON instead of the page: said beside the form.
      let frameProblem = null;
      if (!(frame.contentWindow && frame.contentWindow.openprofFlame)) {
        const text = frame.contentDocument && frame.contentDocument.body ? frame.contentDocument.body.textContent : "";
        try { frameProblem = JSON.parse(text).error; } catch (e) { frameProblem = text || "the flame graph did not load"; }
        frame.hidden = true;
      }
      const problems = [...new Set([frameProblem, ...await tabled].filter((text) => text))];
      problem.textContent = problems.join("; ");
      problem.hidden = !problems.length;
      status.textContent = "";
      status.dataset.state = problems.length ? "failed" : "ready";
    };
    const form = el("form", { id: "fp-form", onsubmit: (e) => { e.preventDefault(); load().catch((error) => say(error.message, true)); } },
      el("div", { class: "controls" }, el("label", {}, "Service ", service), el("label", {}, "Agent labels ", labels), el("label", {}, "Event ", event),
        el("label", {}, "Last ", seconds, " s"), el("label", {}, "Compare with ", compare, " s earlier")),
      el("div", { class: "controls" }, el("label", {}, "Sample labels ", sampleLabels)),
      el("div", { class: "controls" }, el("label", {}, "Top over time: buckets of ", bucket, " s,"), el("label", {}, "top ", top)),
      el("div", { class: "controls" }, el("label", {}, "Traced values of ", method), el("label", {}, "Calls: top ", callsTop),
        el("button", { type: "submit", id: "fp-load" }, "Load"), status));
    view.replaceChildren(heading, el("p", { class: "muted" }, "What the agents in continuous mode sent, summed in ClickHouse across the collectors that forward there."),
      form, problem, frame, topHolder, valuesHolder, callsHolder);
  }

  // ---- snapshots and actions -------------------------------------------------------------------
  async function showSnapshots() {
    const result = await api("/api/snapshots");
    const options = () => result.snapshots.map((snapshot) => el("option", { value: snapshot.id }, snapshot.name + " (" + snapshot.taken_at + ")"));
    const base = el("select", { id: "diff-base" }, options());
    const newer = el("select", { id: "diff-new" }, options());
    if (result.snapshots.length > 1) newer.selectedIndex = result.snapshots.length - 1;
    const frame = el("iframe", { class: "flame", id: "diff-frame", title: "differential flame graph", hidden: true });
    const deltas = el("div", { id: "diff-deltas" });
    const compare = el("button", { type: "button", id: "diff-show", onclick: async () => {
      frame.hidden = false;
      frame.src = "/view/flame?" + query({ snapshot: newer.value, base: base.value });
      try {
        const diff = await api("/api/statistics?" + query({ snapshot: newer.value, base: base.value, kind: "diff", of: "methods" }));
        deltas.replaceChildren(el("h3", {}, "Methods that changed (" + diff.event + ", share of the total)"),
          table(["Method", { label: "Base %", num: 1 }, { label: "New %", num: 1 }, { label: "Change (points)", num: 1 }],
            diff.rows.slice().sort((a, b) => Math.abs(b.total_percent_change) - Math.abs(a.total_percent_change)).slice(0, 30).map((row) => el("tr", { dataset: { name: row.name, change: row.total_percent_change } }, cell(row.name),
              cell(pct(row.base_total_percent), true), cell(pct(row.new_total_percent), true), cell((row.total_percent_change >= 0 ? "+" : "") + row.total_percent_change.toFixed(2), true))), "diff-methods"));
      } catch (error) { deltas.replaceChildren(el("p", { class: "error" }, error.message)); }
    } }, "Compare");
    const rows = result.snapshots.map((snapshot) => el("tr", { dataset: { snapshot: snapshot.id } },
      cell(el("a", { href: "#/snapshot/" + snapshot.id }, snapshot.name)), cell(snapshot.agent), cell(snapshot.taken_at), cell(snapshot.taken_by),
      cell(["html", "pprof", "collapsed", "speedscope"].map((format) => el("a", { href: "/api/export?" + query({ snapshot: snapshot.id, format }), download: "", class: "export" }, format + " ")))));
    view.replaceChildren(el("h2", {}, "Snapshots"),
      result.snapshots.length ? table(["Name", "Agent", "Taken", "By", "Export"], rows, "snapshots") : el("p", { class: "muted" }, "No snapshot yet: open an agent and take one."),
      el("h3", {}, "Compare two"), el("div", { class: "controls" }, el("label", {}, "Base ", base), el("label", {}, "New ", newer), compare), deltas, frame);
  }

  async function showActions() {
    const result = await api("/api/actions");
    view.replaceChildren(el("h2", {}, "Actions on live agents"),
      table(["Time", "Who", "Action", "Agent", "Outcome"], result.actions.map((action) => el("tr", {},
        cell(action.time), cell(action.who), cell(el("code", {}, action.action)), cell(action.agent),
        cell(el("span", { class: action.ok ? "" : "error" }, (action.ok ? "done: " : "refused: ") + action.outcome)))), "actions"));
  }

  // ---- routing -------------------------------------------------------------------------------
  async function route() {
    stopTimers();
    const old = document.getElementById("resource");
    if (old) old.remove();
    const parts = (window.location.hash || "#/fleet").slice(2).split("/");
    if (!state.flame || state.flame.key !== parts[0] + "/" + parts[1]) dropFlame();
    for (const link of document.querySelectorAll(".bar nav a")) link.classList.toggle("current", link.id === "nav-" + parts[0]);
    try {
      if (parts[0] === "agent" || parts[0] === "trace" || parts[0] === "snapshot") await showSource(parts[0], parts[1], parts[2] || "flame");
      else if (parts[0] === "fleet-profile") await showFleetProfile();
      else if (parts[0] === "snapshots") await showSnapshots();
      else if (parts[0] === "actions") await showActions();
      else await showFleet();
    } catch (error) {
      view.replaceChildren(el("p", { class: "error", id: "error" }, error.message));
    }
  }
  window.addEventListener("hashchange", route);
  document.getElementById("logout").addEventListener("click", async () => {
    await api("/logout", { body: {} }).catch(() => {});
    window.location = "/login";
  });
  // Who is logged in, and whether the fleet's profile from ClickHouse is there to show.
  const sessionComing = api("/api/session").catch(() => ({}));
  sessionComing.then((session) => {
    document.getElementById("who").textContent = session.name || "";
    document.getElementById("nav-fleet-profile").hidden = !session.clickhouse;
  });
  route();
})();

(function () {
  "use strict";
  var t0 = performance.now();
  var errors = 0;
  window.addEventListener("error", function () { document.body.dataset.errors = ++errors; });
  var DATA = JSON.parse(document.getElementById("data").textContent);
  document.body.dataset.parseMs = (performance.now() - t0).toFixed(1);
  var ROWS = DATA.rows, PAGE_SIZE = 25, OPEN = "<answer>", CLOSE = "</answer>";
  var FIELDS = ["source", "step", "task", "reason", "score_min", "score_max", "q", "order", "page"];
  var state = {}, matching = [], haystack = null;
  var UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
  var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];
  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function stepKey(step) { return step === null ? "-" : String(step); }
  function fmt(x, digits) {
    return x === null || x === undefined ? "-" : (+x).toFixed(digits === undefined ? 2 : digits);
  }

  // ----- filter options, with counts -----
  function counted(key) {
    var counts = new Map();
    for (var i = 0; i < ROWS.length; i++) {
      var v = key === "step" ? stepKey(ROWS[i].step) : ROWS[i][key];
      counts.set(v, (counts.get(v) || 0) + 1);
    }
    return counts;
  }
  function fillSelect(select, counts, order, label) {
    var values = Array.from(counts.keys()).sort(order);
    select.appendChild(new Option("all (" + ROWS.length + ")", ""));
    values.forEach(function (v) {
      var text = label(v);
      if (text.length > 70) text = text.slice(0, 67) + "...";
      var option = new Option(text + " (" + counts.get(v) + ")", v);
      option.title = v;
      select.appendChild(option);
    });
  }
  var byText = function (a, b) { return a < b ? -1 : a > b ? 1 : 0; };
  var byStep = function (a, b) { return (a === "-" ? -1 : +a) - (b === "-" ? -1 : +b); };
  fillSelect($("f-source"), counted("source"), byText, String);
  fillSelect($("f-step"), counted("step"), byStep, function (v) { return v === "-" ? "none" : v; });
  fillSelect($("f-task"), counted("task"), byText, String);
  var reasons = counted("reason");
  fillSelect($("f-reason"), reasons, function (a, b) { return reasons.get(b) - reasons.get(a) || byText(a, b); },
             function (v) { return v === "" ? "(none: the answer was scored)" : v; });
  // an "any" option must differ from the empty reason: "all" is the unset state, the empty reason a value
  $("f-reason").options[0].value = "\u0000any";

  // ----- state <-> URL hash and form -----
  function readHash() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    state = {};
    FIELDS.forEach(function (k) { if (params.has(k)) state[k] = params.get(k); });
  }
  function writeHash() {
    var params = new URLSearchParams();
    FIELDS.forEach(function (k) {
      if (state[k] !== undefined && !(k === "page" && state[k] === "1")) params.set(k, state[k]);
    });
    var hash = params.toString();
    if (hash !== location.hash.replace(/^#/, "")) history.replaceState(null, "", hash ? "#" + hash : location.pathname);
  }
  function setSelect(select, value, unset) {
    var v = value === undefined ? unset : value;
    if (!Array.prototype.some.call(select.options, function (o) { return o.value === v; })) {
      select.appendChild(new Option(v + " (0)", v));  // a value from a link that this page does not hold
    }
    select.value = v;
  }
  function stateToForm() {
    setSelect($("f-source"), state.source, "");
    setSelect($("f-step"), state.step, "");
    setSelect($("f-task"), state.task, "");
    setSelect($("f-reason"), state.reason, "\u0000any");
    setSelect($("f-order"), state.order, "");
    [["f-score-min", "score_min"], ["f-score-max", "score_max"], ["f-q", "q"]].forEach(function (p) {
      if ($(p[0]).value !== (state[p[1]] || "")) $(p[0]).value = state[p[1]] || "";  // keeps the cursor while typing
    });
  }
  function formToState() {
    var next = {};
    [["source", "f-source"], ["step", "f-step"], ["task", "f-task"], ["order", "f-order"]].forEach(function (p) {
      if ($(p[1]).value !== "") next[p[0]] = $(p[1]).value;
    });
    if ($("f-reason").value !== "\u0000any") next.reason = $("f-reason").value;
    if ($("f-score-min").value !== "") next.score_min = $("f-score-min").value;
    if ($("f-score-max").value !== "") next.score_max = $("f-score-max").value;
    if ($("f-q").value !== "") next.q = $("f-q").value;
    state = next;
  }

  // ----- filtering -----
  function text(row) {
    return (row.prompt + "\n" + row.response + "\n" + (row.expected || "") + "\n" + (row.pred || "")).toLowerCase();
  }
  function filter() {
    var lo = state.score_min !== undefined && state.score_min !== "" ? +state.score_min : -Infinity;
    var hi = state.score_max !== undefined && state.score_max !== "" ? +state.score_max : Infinity;
    var q = (state.q || "").toLowerCase();
    if (q && !haystack) haystack = ROWS.map(text);
    matching = [];
    for (var i = 0; i < ROWS.length; i++) {
      var r = ROWS[i];
      if (state.source !== undefined && r.source !== state.source) continue;
      if (state.step !== undefined && stepKey(r.step) !== state.step) continue;
      if (state.task !== undefined && r.task !== state.task) continue;
      if (state.reason !== undefined && r.reason !== state.reason) continue;
      if ((lo !== -Infinity || hi !== Infinity) && (r.score === null || r.score < lo || r.score > hi)) continue;
      if (q && haystack[i].indexOf(q) < 0) continue;
      matching.push(i);
    }
    var order = state.order || "";
    var score = function (i) { return ROWS[i].score === null ? -Infinity : ROWS[i].score; };
    var step = function (i) { return ROWS[i].step === null ? -1 : ROWS[i].step; };
    if (order === "") matching.sort(function (a, b) { return step(b) - step(a) || a - b; });
    else if (order === "score") matching.sort(function (a, b) { return score(a) - score(b) || a - b; });
    else if (order === "-score") matching.sort(function (a, b) { return score(b) - score(a) || a - b; });
  }

  // ----- rendering -----
  function markedResponse(response) {
    // the block envs/answers.py extracts: the innermost complete <answer>...</answer> pair that ends last
    var pre = el("pre", "response");
    var end = response.lastIndexOf(CLOSE);
    while (end >= 0) {
      var start = end >= 0 ? response.lastIndexOf(OPEN, end) : -1;
      if (start >= 0) {
        var close = response.indexOf(CLOSE, start) + CLOSE.length;
        pre.appendChild(document.createTextNode(response.slice(0, start)));
        pre.appendChild(el("mark", null, response.slice(start, close)));
        pre.appendChild(document.createTextNode(response.slice(close)));
        return pre;
      }
      end = end > 0 ? response.lastIndexOf(CLOSE, end - 1) : -1;
    }
    pre.textContent = response || "(empty response)";
    return pre;
  }
  function column(title, child) {
    var div = el("div");
    div.appendChild(el("h3", null, title));
    div.appendChild(child);
    return div;
  }
  function code(value) {
    return value === null || value === undefined ? el("code", "none", "none") : el("code", null, value);
  }
  function card(r) {
    var art = el("article", "gen " + (r.score === null ? "" : r.score >= 1 ? "good" : r.score > 0 ? "part" : "bad"));
    art.dataset.source = r.source; art.dataset.step = stepKey(r.step); art.dataset.task = r.task;
    art.dataset.score = r.score === null ? "" : r.score; art.dataset.reason = r.reason;
    var meta = el("div", "meta");
    [["", r.source], ["step ", r.step === null ? "-" : r.step], ["", r.task],
     ["score ", fmt(r.score, 3)], ["acc ", fmt(r.acc, 0)],
     ["", r.length === null ? "length ?" : r.length + " " + r.unit],
     ["group ", (UUID.test(r.group) ? r.group.slice(0, 8) : r.group) + " #" + r.sample]].forEach(function (p) {
      var span = el("span", null, p[0]);
      span.appendChild(el("b", null, String(p[1])));
      meta.appendChild(span);
    });
    art.appendChild(meta);
    var cols = el("div", "cols");
    var prompt = el("pre", "prompt", r.prompt);
    cols.appendChild(column("prompt", prompt));
    cols.appendChild(column("response", markedResponse(r.response)));
    var verdict = el("div", "verdict");
    verdict.appendChild(el("h3", null, "expected"));
    verdict.appendChild(code(r.expected));
    verdict.appendChild(el("h3", null, "extracted"));
    verdict.appendChild(code(r.pred));
    verdict.appendChild(el("h3", null, "score / reason"));
    verdict.appendChild(el("div", null, fmt(r.score, 3) + (r.reason ? " - " + r.reason : "")));
    cols.appendChild(verdict);
    art.appendChild(cols);
    return {article: art, prompt: prompt};
  }
  function pages() { return Math.max(1, Math.ceil(matching.length / PAGE_SIZE)); }
  function pager(nav) {
    nav.textContent = "";
    var page = +state.page || 1;
    var prev = el("button", null, "< prev"), next = el("button", null, "next >");
    prev.type = next.type = "button";
    prev.disabled = page <= 1; next.disabled = page >= pages();
    prev.onclick = function () { go(page - 1); };
    next.onclick = function () { go(page + 1); };
    var first = matching.length ? (page - 1) * PAGE_SIZE + 1 : 0;
    var last = Math.min(page * PAGE_SIZE, matching.length);
    nav.appendChild(prev);
    nav.appendChild(el("span", null, "page " + page + " of " + pages() + " - rows " + first + "-" + last + " of " +
                           matching.length + " matching"));
    nav.appendChild(next);
  }
  function go(page) { state.page = String(page); render(); window.scrollTo(0, $("filters").offsetTop); }
  function renderRows() {
    var page = Math.min(Math.max(1, Math.floor(+state.page) || 1), pages());
    state.page = String(page);
    var box = $("rows"), prompts = [];
    box.textContent = "";
    var fragment = document.createDocumentFragment();
    matching.slice((page - 1) * PAGE_SIZE, page * PAGE_SIZE).forEach(function (i) {
      var c = card(ROWS[i]);
      fragment.appendChild(c.article);
      prompts.push(c.prompt);
    });
    if (!matching.length) fragment.appendChild(el("p", "none", "no generation matches these filters"));
    box.appendChild(fragment);
    prompts.forEach(function (p) { p.scrollTop = p.scrollHeight; });  // the question sits at the prompt's end
    pager($("pager-top"));
    pager($("pager-bottom"));
  }
  function renderSummary() {
    var by = new Map();
    matching.forEach(function (i) {
      var r = ROWS[i], s = by.get(r.task);
      if (!s) by.set(r.task, s = {n: 0, score: 0, scored: 0, acc: 0, accn: 0, found: 0, foundn: 0, len: 0, lenn: 0});
      s.n++;
      if (r.score !== null) { s.score += r.score; s.scored++; }
      if (r.acc !== null) { s.acc += r.acc; s.accn++; }
      if (r.found !== null) { s.found += r.found; s.foundn++; }
      if (r.length !== null) { s.len += r.length; s.lenn++; }
    });
    var table = $("summary");
    table.textContent = "";
    var head = el("tr");
    ["task", "generations", "mean score", "accuracy", "answer rate", "mean length"].forEach(function (h) {
      head.appendChild(el("th", null, h));
    });
    table.appendChild(head);
    Array.from(by.keys()).sort(byText).forEach(function (task) {
      var s = by.get(task), tr = el("tr");
      [task, s.n, s.scored ? fmt(s.score / s.scored, 3) : "-", s.accn ? fmt(s.acc / s.accn, 3) : "-",
       s.foundn ? fmt(s.found / s.foundn, 3) : "-", s.lenn ? fmt(s.len / s.lenn, 0) : "-"].forEach(function (v) {
        tr.appendChild(el("td", null, String(v)));
      });
      table.appendChild(tr);
    });
  }

  // ----- per-task reward over steps (inline SVG) -----
  var SVG = "http://www.w3.org/2000/svg", taskColor = new Map(), chartLines = [];
  Array.from(counted("task").keys()).sort(byText).forEach(function (task, i) {
    taskColor.set(task, i < COLORS.length ? COLORS[i] : "hsl(" + (i * 137.5) % 360 + ",60%,45%)");
  });
  function svg(tag, attrs, parent) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (parent) parent.appendChild(e);
    return e;
  }
  function drawChart(source, spec) {
    var W = 560, H = 220, L = 40, R = 30, T = 10, B = 26;
    var tasks = Object.keys(spec.tasks), xs = [], ys = [0, 1];
    tasks.forEach(function (t) { spec.tasks[t].forEach(function (p) { xs.push(p[0]); ys.push(p[1]); }); });
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    var y0 = Math.min.apply(null, ys), y1 = Math.max.apply(null, ys);
    var sx = function (x) { return L + (x - x0) / ((x1 - x0) || 1) * (W - L - R); };
    var sy = function (y) { return H - B - (y - y0) / ((y1 - y0) || 1) * (H - T - B); };
    var box = el("div", "chart");
    box.appendChild(el("h2", null, spec.title));
    var root = svg("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H, "data-source": source}, box);
    svg("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, "class": "axis"}, root);
    svg("line", {x1: L, y1: T, x2: L, y2: H - B, "class": "axis"}, root);
    [y0, (y0 + y1) / 2, y1].forEach(function (y) {
      svg("text", {x: L - 4, y: sy(y) + 3, "text-anchor": "end"}, root).textContent = fmt(y, 2);
    });
    [x0, x1].forEach(function (x) {
      svg("text", {x: sx(x), y: H - B + 14, "text-anchor": "middle"}, root).textContent = "step " + x;
    });
    tasks.forEach(function (task) {
      var points = spec.tasks[task], color = taskColor.get(task) || "#333";
      var g = svg("g", {"data-task": task}, root);
      svg("polyline", {points: points.map(function (p) { return sx(p[0]) + "," + sy(p[1]); }).join(" "),
                       stroke: color}, g);
      if (points.length <= 200) points.forEach(function (p) {
        var dot = svg("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: color}, g);
        svg("title", {}, dot).textContent = task + " - step " + p[0] + ": " + fmt(p[1], 3) + " over " + p[2];
      });
      chartLines.push(g);
    });
    var legend = el("div", "legend");
    tasks.forEach(function (task) {
      var a = el("a", null, task), swatch = el("i");
      swatch.style.background = taskColor.get(task) || "#333";
      a.insertBefore(swatch, a.firstChild);
      a.title = "show only " + task;
      a.onclick = function () { state.task = task; state.page = "1"; render(); };
      legend.appendChild(a);
    });
    box.appendChild(legend);
    $("charts").appendChild(box);
  }
  function highlightCharts() {
    chartLines.forEach(function (g) {
      g.classList.toggle("faded", state.task !== undefined && g.getAttribute("data-task") !== state.task);
    });
  }

  // ----- wiring -----
  function render() {
    var t = performance.now();
    stateToForm();
    filter();
    document.body.dataset.filterMs = (performance.now() - t).toFixed(1);
    renderSummary();
    renderRows();
    highlightCharts();
    writeHash();
    document.body.dataset.matching = matching.length;
    document.body.dataset.renderMs = (performance.now() - t).toFixed(1);
  }
  function onForm() { formToState(); state.page = "1"; render(); }
  ["f-source", "f-step", "f-task", "f-reason", "f-score-min", "f-score-max", "f-order"].forEach(function (id) {
    $(id).addEventListener("change", onForm);
  });
  var typing = null;
  $("f-q").addEventListener("input", function () { clearTimeout(typing); typing = setTimeout(onForm, 200); });
  $("f-reset").addEventListener("click", function () { state = {}; render(); });
  window.addEventListener("hashchange", function () { readHash(); render(); });

  var sources = counted("source");
  $("counts").textContent = ROWS.length + " generations: " + Array.from(sources.keys()).sort(byText).map(function (s) {
    return s + " " + sources.get(s);
  }).join(", ");
  Object.keys(DATA.series).forEach(function (source) { drawChart(source, DATA.series[source]); });
  readHash();
  render();
  document.body.dataset.loadMs = (performance.now() - t0).toFixed(1);  // this script: parse, charts, first render
  document.body.dataset.readyMs = performance.now().toFixed(1);  // since navigation started: reading the file too
  document.body.dataset.state = "ready";
})();

"use strict";
// The status page's script: an ordinary client of the admin listener's JSON endpoints, on the
// same origin (the Content-Security-Policy allows no other). The admin token, when the server
// asks for one (401), is kept in this tab's sessionStorage and sent as a bearer token.
(function () {
  var EVERY_MS = 5000;
  var RECENT_LIMIT = 25;
  var $ = function (id) { return document.getElementById(id); };
  var timer = null;
  var tableInfo = {};   // name -> GET /tables/{name}
  var pending = null;   // the change awaiting confirmation

  function el(tag, attrs, children) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        if (k === "text") e.textContent = attrs[k];
        else if (k === "cls") e.className = attrs[k];
        else e.setAttribute(k, attrs[k]);
      });
    }
    (children || []).forEach(function (c) {
      if (c !== null && c !== undefined) e.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return e;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  function token() { try { return sessionStorage.getItem("clef-admin-token"); } catch (e) { return null; } }

  // One request to the admin listener: resolves {status, body}; a 401 shows the token form.
  function api(method, path, body) {
    var headers = {};
    var t = token();
    if (t) headers["Authorization"] = "Bearer " + t;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    return fetch(path, { method: method, headers: headers, body: body, cache: "no-store", credentials: "omit" })
      .then(function (r) {
        return r.text().then(function (text) {
          var json = null;
          try { json = JSON.parse(text); } catch (e) { json = null; }
          if (r.status === 401) { $("login").hidden = false; }
          return { status: r.status, body: json, text: text };
        });
      });
  }

  function get(path) {
    return api("GET", path).then(function (r) { return r.status === 200 ? r.body : null; });
  }

  function duration(s) {
    s = Math.floor(s);
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + m + "m";
    if (m) return m + "m " + (s % 60) + "s";
    return s + "s";
  }

  function num(x, digits) {
    if (x === null || x === undefined) return "–";
    return typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(digits === undefined ? 2 : digits)) : String(x);
  }

  function kv(pairs) {
    var dl = el("dl", { cls: "kv" });
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || p[1] === "") return;
      dl.appendChild(el("dt", { text: p[0] }));
      dl.appendChild(el("dd", null, [typeof p[1] === "string" ? p[1] : p[1]]));
    });
    return dl;
  }

  function bars(items, count, cls) {
    var ul = el("ul", { cls: "bars" });
    var max = items.reduce(function (m, i) { return Math.max(m, i[count]); }, 1);
    items.forEach(function (i) {
      var fill = el("div", { cls: "fill" + (cls ? " " + cls : "") });
      fill.style.width = Math.max(2, Math.round(100 * i[count] / max)) + "%";
      ul.appendChild(el("li", null, [el("span", { cls: "id mono", text: i.rule_id, title: i.rule_id }),
        el("div", { cls: "track" }, [fill]), el("span", { text: String(i[count]) })]));
    });
    return ul;
  }

  // --- changes: shown, confirmed on the page, sent through the admin API, answered ----------

  function ask(text, method, path, body) {
    pending = { method: method, path: path, body: body };
    $("confirm-text").textContent = text;
    $("confirm").hidden = false;
  }

  function confirmed() {
    var p = pending;
    pending = null;
    $("confirm").hidden = true;
    if (!p) return;
    api(p.method, p.path, p.body).then(function (r) {
      var box = $("result");
      box.className = "bar " + (r.status === 200 ? "ok" : "bad");
      clear(box).appendChild(el("span", { cls: "mono", text: p.method + " " + p.path + " → " + r.status }));
      box.appendChild(el("pre", { text: r.text }));
      box.appendChild(el("button", { type: "button", id: "result-close", text: "Close" }));
      box.hidden = false;
      refresh();
    });
  }

  document.addEventListener("click", function (ev) {
    var b = ev.target.closest ? ev.target.closest("button") : null;
    if (!b) return;
    if (b.id === "confirm-yes") return confirmed();
    if (b.id === "confirm-no") { pending = null; $("confirm").hidden = true; return; }
    if (b.id === "result-close") { $("result").hidden = true; return; }
    var table = b.getAttribute("data-table");
    var rule = b.getAttribute("data-rule");
    if (b.hasAttribute("data-switch")) {
      var on = b.getAttribute("data-switch") === "on";
      ask("Switch rule \"" + rule + "\" of table \"" + table + "\" " + (on ? "on" : "off") + "? It takes effect at once on every core.",
        "PUT", "/tables/" + encodeURIComponent(table) + "/rules/" + encodeURIComponent(rule) + "/enabled", on ? "true" : "false");
    } else if (b.hasAttribute("data-rollback")) {
      ask("Roll table \"" + table + "\" back to version " + b.getAttribute("data-rollback") + "? It stays pinned there until its file changes.",
        "POST", "/tables/" + encodeURIComponent(table) + "/rollback");
    }
  });

  // --- rendering -------------------------------------------------------------------------------

  function renderHealth(h) {
    var s = $("status");
    if (!h) { s.textContent = "unreachable"; s.className = "badge bad"; return; }
    s.textContent = h.status;
    s.className = "badge " + (h.status === "ok" ? "ok" : h.status === "degraded" ? "warn" : "bad");
    $("summary").textContent = "v" + h.version + " · up " + duration(h.uptime_seconds) + " · load " + num(h.load) +
      " · " + h.inflight + " in flight";
  }

  function renderProblems(h, tables) {
    var ul = clear($("problems"));
    if (h && h.errors) {
      Object.keys(h.errors).forEach(function (name) {
        ul.appendChild(el("li", null, [el("b", { text: name }), ": ", el("pre", { text: h.errors[name] })]));
      });
    }
    if (h && h.degraded) {
      h.degraded.filter(function (d) { return d !== "tables"; }).forEach(function (d) {
        ul.appendChild(el("li", null, [el("b", { text: d }), " degraded", h[d] ? el("pre", { text: JSON.stringify(h[d], null, 1) }) : null]));
      });
    }
    (tables || []).forEach(function (t) {
      if (t.error && !(h && h.errors && h.errors[t.name])) {
        ul.appendChild(el("li", null, [el("b", { text: t.name }), ": ", el("pre", { text: t.error })]));
      }
    });
    $("problems-section").hidden = !ul.firstChild;
  }

  function renderTables(list, activity) {
    var root = clear($("tables"));
    var cards = el("div", { cls: "cards" });
    root.appendChild(cards);
    var act = {};
    ((activity && activity.tables) || []).forEach(function (a) { act[a.name] = a; });
    $("window").textContent = activity ? "(figures over the last " + duration(activity.window_seconds) + ")" : "";
    list.forEach(function (t) {
      var info = tableInfo[t.name] || {};
      var a = act[t.name];
      var card = el("div", { cls: "card", id: "table-" + t.name, "data-table": t.name });
      var head = el("div", { cls: "head" }, [el("h3", { cls: "mono", text: t.name }),
        el("span", { cls: "small muted", text: t.kind || "not loaded" }),
        t.default ? el("span", { cls: "badge ok", text: "default" }) : null,
        info.pinned ? el("span", { cls: "badge warn", text: "pinned" }) : null,
        t.error ? el("span", { cls: "badge bad", text: "load error" }) : null]);
      card.appendChild(head);
      var off = info.switched_off || [];
      card.appendChild(kv([
        ["version", t.version ? t.version + (t.file_version && t.file_version !== t.version ? " (file " + t.file_version + ")" : "") : "none"],
        ["rules", t.rule_count !== undefined ? String(t.rule_count) : null],
        ["loaded", t.loaded_at || null],
        ["pinned", info.pinned ? info.pinned.version + " since " + info.pinned.since : null],
        ["switched off", off.length ? el("span", { cls: "mono bad switched-off", text: off.join(", ") }) : null],
        ["decisions/s", a ? num(a.decisions_per_second, 3) : null],
        ["decisions", a ? a.decisions + " (" + a.matched + " matched, " + a["default"] + " default, " + a.invalid_input + " invalid)" : null],
        ["warnings", a && a.warnings ? el("span", { cls: "warn", text: String(a.warnings) }) : null]
      ]));
      if (a && a.top_rules.length) {
        card.appendChild(el("div", { cls: "small muted", text: "top rules by hits" }));
        card.appendChild(bars(a.top_rules, "hits"));
      }
      if (a && a.warning_rules.length) {
        card.appendChild(el("div", { cls: "small muted", text: "warnings by rule" }));
        card.appendChild(bars(a.warning_rules, "warnings", "warn"));
      }
      if (t.error) card.appendChild(el("pre", { cls: "bad", text: t.error }));
      var prev = info.previous_versions || [];
      if (prev.length) {
        card.appendChild(el("button", { type: "button", cls: "danger", "data-table": t.name, "data-rollback": prev[0],
          text: "Roll back to " + prev[0] }));
      }
      if (info.rules && info.rules.length) {
        var ul = el("ul", { cls: "rules" });
        info.rules.forEach(function (r) {
          var switchedOff = !!r.switched_off;
          var state = switchedOff ? "switched off" : r.enabled ? "on" : "disabled in file";
          var li = el("li", { cls: r.enabled ? "" : "off", "data-rule": r.id }, [
            el("span", { cls: "mono", text: r.id }), " ",
            el("span", { cls: "small " + (r.enabled ? "ok" : "bad"), text: state }), " ",
            r.enabled || switchedOff ? el("button", { type: "button", cls: r.enabled ? "danger" : "", "data-table": t.name, "data-rule": r.id,
              "data-switch": r.enabled ? "off" : "on", text: r.enabled ? "Switch off" : "Switch on" }) : null,
            el("pre", { text: r.condition })]);
          ul.appendChild(li);
        });
        var det = el("details", { "data-rules": t.name }, [el("summary", { cls: "small", text: "rules (" + info.rules.length + ")" }), ul]);
        if (openRules[t.name]) det.open = true;
        det.addEventListener("toggle", function () { openRules[t.name] = det.open; });
        card.appendChild(det);
      }
      cards.appendChild(card);
    });
  }
  var openRules = {};

  function renderRouter(r) {
    var section = $("router-section");
    if (!r || !r.enabled) { section.hidden = true; return; }
    section.hidden = false;
    var t = clear($("router"));
    var cols = ["id", "addr", "state", "score", "load", "inflight", "routed", "forwarded", "failed", "ejections", "probe_ms", "last_error"];
    t.appendChild(el("tr", null, cols.map(function (c) { return el("th", { text: c }); })));
    r.instances.forEach(function (i) {
      t.appendChild(el("tr", { "data-instance": i.id }, cols.map(function (c) {
        var cls = c === "state" ? (i.state === "healthy" || i.state === "local" ? "ok" : i.state === "unknown" ? "warn" : "bad") : "";
        return el("td", { cls: cls, text: num(i[c]) });
      })));
    });
    var fo = Object.keys(r.failovers || {});
    if (fo.length) t.appendChild(el("tr", null, [el("td", { text: "failovers: " + fo.map(function (k) { return k + " → " + r.failovers[k]; }).join(", ") })]));
  }

  function renderTuning(reports) {
    var root = clear($("tuning"));
    $("tuning-section").hidden = !reports.length;
    reports.forEach(function (rep) {
      var t = el("table", { "data-tuning": rep.table });
      t.appendChild(el("tr", null, ["arm", "params", "samples", "mean reward", "p better", "ready"].map(function (c) { return el("th", { text: c }); })));
      var arms = [Object.assign({ id: "baseline" }, rep.baseline || {})].concat(rep.variants || []);
      arms.forEach(function (a) {
        t.appendChild(el("tr", null, [el("td", { cls: "mono", text: a.id }), el("td", { cls: "mono", text: JSON.stringify(a.params || {}) }),
          el("td", { text: num(a.samples) }), el("td", { text: num(a.mean_reward, 3) }), el("td", { text: num(a.p_better, 3) }),
          el("td", { cls: a.ready ? "ok" : "", text: a.id === "baseline" ? "" : a.ready ? "ready" : "no" })]));
      });
      root.appendChild(el("h3", { cls: "mono", text: rep.table + " · " + rep.status }));
      root.appendChild(el("div", { cls: "scroll" }, [t]));
    });
  }

  function explanation(s) {
    var info = tableInfo[s.table] || {};
    var rule = (info.rules || []).filter(function (r) { return r.id === s.rule_id; })[0];
    var lines = [];
    if (s.matched) lines.push("Rule " + s.rule_id + " matched" + (rule ? ": " + rule.condition : "") + " → " + JSON.stringify(s.action));
    else lines.push("No rule matched: the default answered → " + JSON.stringify(s.action));
    lines.push(s.tried + " rule condition(s) evaluated, " + (s.latency_ns / 1000).toFixed(1) + " µs");
    (s.warnings || []).forEach(function (w) { lines.push("warning: " + w.rule_id + ": " + w.message); });
    if (s.shadow) lines.push("shadow " + s.shadow.table + ": " + (s.shadow.agrees ? "agrees" : "disagrees: " + s.shadow.rule_id));
    if (s.variant) lines.push("variant " + s.variant + " " + JSON.stringify(s.params));
    if (s.degraded) lines.push("degraded: " + s.degraded);
    if (s.disabled_rules && s.disabled_rules.length) lines.push("switched off then: " + s.disabled_rules.join(", "));
    if (s.pinned) lines.push("pinned version");
    return lines.join("\n");
  }

  function renderRecent(r) {
    var root = clear($("recent"));
    var note = $("recent-note");
    if (!r) { note.textContent = "Snapshots are off or unavailable: recent decisions need snapshots.enabled: true."; return; }
    note.textContent = r.count + " shown" + (r.window && r.window.oldest ? " · memory holds " + r.window.snapshots + " since " + r.window.oldest : "");
    r.snapshots.forEach(function (s) {
      var det = el("details", { cls: "decision", "data-snapshot": s.id }, [
        el("summary", null, [el("span", { cls: "mono small", text: s.timestamp }), el("span", { cls: "mono", text: s.table }),
          el("span", { cls: "mono " + (s.matched ? "" : "muted"), text: s.rule_id === null ? "(default)" : String(s.rule_id) }),
          el("span", { cls: "mono small muted", text: JSON.stringify(s.action) })]),
        el("div", { cls: "small muted", text: "input" }), el("pre", { text: JSON.stringify(s.input, null, 1) }),
        el("div", { cls: "small muted", text: "explanation" }), el("pre", { text: explanation(s) }),
        el("div", { cls: "small muted mono", text: "id " + s.id })]);
      if (openDecisions[s.id]) det.open = true;
      det.addEventListener("toggle", function () { openDecisions[s.id] = det.open; });
      root.appendChild(det);
    });
  }
  var openDecisions = {};

  function fillFilters(list) {
    var sel = $("f-table");
    var chosen = sel.value;
    var names = list.map(function (t) { return t.name; });
    var have = Array.prototype.map.call(sel.options, function (o) { return o.value; }).slice(1);
    if (have.join("\n") !== names.join("\n")) {
      while (sel.options.length > 1) sel.remove(1);
      names.forEach(function (n) { sel.appendChild(el("option", { value: n, text: n })); });
      sel.value = names.indexOf(chosen) >= 0 ? chosen : "";
    }
    var dl = clear($("f-rules"));
    var info = tableInfo[sel.value];
    ((info && info.rules) || []).forEach(function (r) { dl.appendChild(el("option", { value: r.id })); });
  }

  function recentQuery() {
    var q = "/snapshots?limit=" + RECENT_LIMIT;
    if ($("f-table").value) q += "&table=" + encodeURIComponent($("f-table").value);
    if ($("f-rule").value.trim()) q += "&rule=" + encodeURIComponent($("f-rule").value.trim());
    return q;
  }

  // --- one refresh: every endpoint the page shows ------------------------------------------------

  var refreshing = false;
  function refresh() {
    if (refreshing) return Promise.resolve();
    refreshing = true;
    return Promise.all([get("/health"), get("/tables"), get("/activity"), get("/router"), get(recentQuery())])
      .then(function (r) {
        var health = r[0], tables = (r[1] && r[1].tables) || [], activity = r[2];
        var tuned = ((activity && activity.tables) || []).filter(function (a) { return a.tuned; }).map(function (a) { return a.name; });
        return Promise.all([
          Promise.all(tables.map(function (t) { return get("/tables/" + encodeURIComponent(t.name)); })),
          Promise.all(tuned.map(function (n) { return get("/tuning/" + encodeURIComponent(n)); }))
        ]).then(function (more) {
          tableInfo = {};
          more[0].forEach(function (info, i) { if (info) tableInfo[tables[i].name] = info; });
          renderHealth(health);
          renderProblems(health, tables);
          renderTables(tables, activity);
          renderRouter(r[3]);
          renderTuning(more[1].filter(function (x) { return x; }));
          fillFilters(tables);
          renderRecent(r[4]);
          $("updated").textContent = "updated " + new Date().toLocaleTimeString();
          document.body.setAttribute("data-loaded", "true");
        });
      })
      .catch(function (e) { renderHealth(null); $("updated").textContent = String(e); })
      .then(function () { refreshing = false; });
  }

  function schedule() {
    if (timer) clearInterval(timer);
    timer = $("auto").checked ? setInterval(function () { if (!document.hidden) refresh(); }, EVERY_MS) : null;
  }

  $("every").textContent = String(EVERY_MS / 1000);
  $("auto").addEventListener("change", schedule);
  $("f-table").addEventListener("change", function () { $("f-rule").value = ""; refresh(); });
  $("f-rule").addEventListener("change", refresh);
  $("login").addEventListener("submit", function (ev) {
    ev.preventDefault();
    try { sessionStorage.setItem("clef-admin-token", $("token").value.trim()); } catch (e) { /* no storage: ask again */ }
    $("login").hidden = true;
    refresh();
  });
  document.addEventListener("visibilitychange", function () { if (!document.hidden) refresh(); });
  refresh();
  schedule();
})();

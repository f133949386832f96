// Tidemark status page: polls GET /status for the page of rows it shows (filtered, sorted and
// counted by the service, so 10,000 tables cost what 100 do) and /status/lag for those rows.
// No framework, nothing loaded from elsewhere. Text from the server is only ever set as text.
"use strict";
(function () {
  var REFRESH_MS = 5000, PAGE = 100, TOKEN_KEY = "tidemark.token";
  var $ = function (id) { return document.getElementById(id); };
  var state = { data: null, sort: "name", dir: 1, limit: PAGE, filter: "", problems: true, lag: {}, armed: null };

  function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }
  function authHeaders(h) {
    h = h || {};
    if (token()) h.Authorization = "Bearer " + token();
    return h;
  }
  function say(text, bad) { var m = $("msg"); m.textContent = text; m.className = bad ? "bad" : ""; }

  function fmtNum(n) { return n == null ? "" : Math.round(n).toLocaleString("en-US"); }
  function fmtBytes(n) {
    if (n == null) return "";
    var u = ["B", "KB", "MB", "GB", "TB"], i = 0;
    while (Math.abs(n) >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : n) + " " + u[i];
  }
  function fmtDur(s) {
    if (s == null) return "";
    s = Math.round(s);
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor(s % 86400 / 3600) + "h";
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  // Copy progress in percent: rows over the estimate while copying (at most 99), 100 once the
  // table is hydrated after a copy; null when there is no copy to show.
  function progress(x) {
    if (x.state === "hydrated" && (x.snapshot_rows_copied || x.snapshot_rows_estimated)) return 100;
    if (x.state !== "hydrating") return null;
    if (!x.snapshot_rows_estimated) return 0;
    return Math.min(99, Math.floor(100 * (x.snapshot_rows_copied || 0) / x.snapshot_rows_estimated));
  }
  // The page of rows to ask for: the filter, the order (problems first: failed, then stuck,
  // then copying; the service ranks them) and how many.
  function query() {
    return "/status?limit=" + state.limit + "&sort=" + state.sort + "&dir=" + (state.dir > 0 ? "asc" : "desc") +
      "&problems=" + state.problems + (state.filter ? "&filter=" + encodeURIComponent(state.filter) : "");
  }

  function renderHeader(d) {
    var role = $("role");
    role.textContent = d.role; role.className = "badge " + d.role;
    var ready = $("ready");
    ready.textContent = d.ready ? "ready" : "not ready"; ready.className = "badge " + (d.ready ? "ok" : "bad");
    $("version").textContent = "version " + d.version;
    $("uptime").textContent = "up " + fmtDur(d.uptime_seconds);
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
    conn("pg", d.postgres, d.postgres.server_version ? "server " + d.postgres.server_version +
      (d.postgres.tls_in_use ? ", this connection encrypted" : ", this connection not encrypted") : "");
    conn("kafka", d.kafka, d.kafka.brokers ? d.kafka.brokers + " broker(s)" : "");
    var r = d.schema_registry;
    $("registry").hidden = !r;
    if (r) {
      conn("registry", {state: r.state, error: r.error, tls: r.url}, "");
      $("registry").querySelector(".warn").textContent = r.waiting_since ?
        "\u26a0 registrations waiting since " + new Date(r.waiting_since).toLocaleTimeString() + " (" +
        r.failed_attempts + " failed attempts: " + r.last_error + "); nothing is lost" : "";
    }
    var s = d.slot, card = $("slot"), fill = card.querySelector(".fill");
    var txt = s.name + ": " + (s.exists ? (s.active ? "active" : "inactive") + (s.wal_status ? ", wal_status " + s.wal_status : "") : "does not exist yet");
    card.querySelector(".state").textContent = txt;
    var detail = "retains " + (s.retained_bytes == null ? "?" : fmtBytes(s.retained_bytes)) + " of WAL";
    var pct = 0;
    if (s.max_keep_bytes == null) detail += "; max_slot_wal_keep_size unlimited";
    else {
      pct = s.max_keep_bytes > 0 ? Math.min(100, 100 * (s.retained_bytes || 0) / s.max_keep_bytes) : 100;
      detail += " of max_slot_wal_keep_size " + fmtBytes(s.max_keep_bytes) + " (" + pct.toFixed(1) + "%)";
    }
    card.querySelector(".detail").textContent = detail;
    fill.style.width = pct + "%";
    fill.className = "fill" + (pct > 80 ? " high" : "");
    var fo = d.failover, fp = card.querySelector(".failover");
    fp.textContent = !fo ? "" : fo.ready ? "standby copy (" + fo.standby + "): failover-ready, a promotion keeps it" :
      "standby copy" + (fo.standby ? " (" + fo.standby + ")" : "") + ": NOT failover-ready for " +
      fmtDur((Date.parse(fo.sampled_at) - Date.parse(fo.since)) / 1000) + ": " + fo.reason;
    fp.className = "failover" + (fo && !fo.ready ? " warn" : "");
    var counts = d.counts || {};
    var parts = [d.total + " tables"];
    ["failed", "hydrating", "hydrated", "removed"].forEach(function (k) { if (counts[k]) parts.push(counts[k] + " " + k); });
    $("totals").querySelector(".state").textContent = parts.join(", ");
    $("reasons").textContent = (d.reasons || []).join("; ");
    $("auth-state").textContent = !d.admin ? "admin endpoints off (no CDC_HTTP_TOKEN)" :
      d.full_errors ? "token in use: full error texts, re-copy" : "no token: error texts redacted";
  }
  function conn(id, c, extra) {
    var card = $(id);
    var st = card.querySelector(".state");
    st.textContent = c.state + (extra ? " \u00b7 " + extra : "") + (c.error ? ": " + c.error : "");
    st.className = "state " + (c.state === "connected" ? "" : "bad");
    card.querySelector(".tls").textContent = c.tls || "";
    card.querySelector(".warn").textContent = c.tls_warning ? "\u26a0 " + c.tls_warning : "";
  }

  function row(x, admin) {
    var tr = el("tr", x.state);
    tr.dataset.export = x.export;
    var name = el("td", "name", x.export);
    name.appendChild(el("small", "", x.topic));
    tr.appendChild(name);
    var st = el("td");
    st.appendChild(el("span", "badge " + x.state, x.state));
    if (x.phase) st.appendChild(document.createTextNode(" " + x.phase));
    if (x.snapshot_attempt) st.appendChild(el("span", "dim", " #" + x.snapshot_attempt));
    if (x.error) { var r = el("div", "reason", x.error); r.title = x.error; st.appendChild(r); }
    tr.appendChild(st);
    tr.appendChild(el("td", "num", x.watermark || "\u2014"));
    tr.appendChild(el("td", "num lag-bytes", fmtBytes(x.lag_bytes)));
    tr.appendChild(el("td", "num lag-seconds", x.lag_seconds == null ? "" : x.lag_seconds.toFixed(1)));
    var copy = el("td", "copy"), p = progress(x);
    if (p != null) {
      var bar = el("div", "bar"), fill = el("div", "fill" + (p === 100 ? " done" : ""));
      bar.setAttribute("role", "progressbar");
      bar.setAttribute("aria-valuemin", "0");
      bar.setAttribute("aria-valuemax", "100");
      bar.setAttribute("aria-valuenow", String(p));
      fill.style.width = p + "%";
      bar.appendChild(fill);
      copy.appendChild(bar);
      var t = p + "% \u00b7 " + fmtNum(x.snapshot_rows_copied || 0) + " of ~" + fmtNum(x.snapshot_rows_estimated || 0) + " rows";
      if (x.state === "hydrating" && x.rows_per_second != null) t += " \u00b7 " + fmtNum(x.rows_per_second) + " rows/s";
      if (x.state === "hydrating" && x.eta_seconds != null) t += " \u00b7 ETA " + fmtDur(x.eta_seconds);
      copy.appendChild(el("div", "copytext", t));
    }
    tr.appendChild(copy);
    var chart = el("td", "chart");
    drawLag(chart, state.lag[x.export]);
    tr.appendChild(chart);
    var act = el("td");
    if (admin && x.state === "hydrated") {
      var armed = state.armed && state.armed.name === x.export && state.armed.until > Date.now();
      var b = el("button", "recopy" + (armed ? " armed" : ""), armed ? "confirm re-copy" : "re-copy");
      b.type = "button";
      b.dataset.export = x.export;
      act.appendChild(b);
    }
    tr.appendChild(act);
    return tr;
  }

  var SVG = "http://www.w3.org/2000/svg";
  // drawLag draws a series {t: seconds before now, s: lag seconds} over the last 15 minutes.
  function drawLag(td, series) {
    td.textContent = "";
    if (!series || !series.t || !series.t.length) return;
    var w = 120, h = 24, top = 1, maxS = 1;
    series.s.forEach(function (v) { if (v > maxS) maxS = v; });
    var svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "lag");
    svg.setAttribute("viewBox", "0 0 " + w + " " + h);
    var base = document.createElementNS(SVG, "line");
    base.setAttribute("x1", "0"); base.setAttribute("x2", String(w));
    base.setAttribute("y1", String(h - 0.5)); base.setAttribute("y2", String(h - 0.5));
    svg.appendChild(base);
    var pts = series.t.map(function (t, i) {
      var x = Math.max(0, w * (900 + t) / 900), y = h - 1 - (h - 1 - top) * series.s[i] / maxS;
      return x.toFixed(1) + "," + y.toFixed(1);
    });
    var line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.appendChild(line);
    var title = document.createElementNS(SVG, "title");
    title.textContent = "lag over the last 15 minutes, max " + maxS.toFixed(1) + "s (" + series.t.length + " samples)";
    svg.appendChild(title);
    td.appendChild(svg);
    td.appendChild(el("div", "copytext", "max " + fmtDur(series.s.reduce(function (a, b) { return Math.max(a, b); }, 0)) +
      " over " + fmtDur(-series.t[0])));
    td.title = title.textContent;
  }

  function renderRows() {
    var d = state.data;
    if (!d) return;
    var shown = d.exports, frag = document.createDocumentFragment();
    shown.forEach(function (x) { frag.appendChild(row(x, d.admin)); });
    var body = $("rows");
    body.textContent = "";
    body.appendChild(frag);
    $("count").textContent = d.total + " tables, " + d.matched + " match" +
      (shown.length < d.matched ? ", " + shown.length + " shown" : "");
    var more = $("more");
    more.hidden = shown.length >= d.matched;
    more.textContent = "Show " + Math.min(PAGE, d.matched - shown.length) + " more";
    document.querySelectorAll("th[data-sort]").forEach(function (th) {
      th.className = th.dataset.sort === state.sort ? (state.dir > 0 ? "asc" : "desc") : "";
    });
    return shown;
  }

  function fetchLag(shown) {
    var names = shown.filter(function (x) { return x.watermark; }).map(function (x) { return x.export; });
    if (!names.length) return;
    var q = names.map(function (n) { return "export=" + encodeURIComponent(n); }).join("&");
    fetch("/status/lag?" + q, { cache: "no-store" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (j) {
      if (!j) return;
      state.lag = j.exports || {};
      document.querySelectorAll("#rows tr").forEach(function (tr) {
        drawLag(tr.querySelector("td.chart"), state.lag[tr.dataset.export]);
      });
    }).catch(function () {});
  }

  var timer = null;
  function refresh() {
    clearTimeout(timer);
    var url = query();
    fetch(url, { headers: authHeaders(), cache: "no-store" }).then(function (r) {
      if (r.status === 401 || r.status === 403) {
        sessionStorage.removeItem(TOKEN_KEY);
        return r.text().then(function (t) { say("The token was refused (" + r.status + "): " + t.trim(), true); return fetch(url, { cache: "no-store" }); });
      }
      return r;
    }).then(function (r) {
      if (!r.ok) throw new Error("GET /status: " + r.status);
      return r.json();
    }).then(function (d) {
      state.data = d;
      renderHeader(d);
      fetchLag(renderRows());
    }).catch(function (e) {
      say("Cannot reach the service: " + e.message, true);
      $("role").textContent = "unreachable"; $("role").className = "badge bad";
    }).then(function () { timer = setTimeout(refresh, REFRESH_MS); });
  }

  function recopy(b) {
    var name = b.dataset.export;
    if (!token()) { say("Enter the admin token (CDC_HTTP_TOKEN) above to re-copy a table.", true); $("token").focus(); return; }
    // A first click arms the button for 5 s (it stays armed across refreshes); a second one sends.
    if (!(state.armed && state.armed.name === name && state.armed.until > Date.now())) {
      state.armed = { name: name, until: Date.now() + 5000 };
      b.classList.add("armed"); b.textContent = "confirm re-copy";
      setTimeout(renderRows, 5100);
      return;
    }
    state.armed = null;
    b.disabled = true;
    fetch("/exports/" + encodeURIComponent(name) + "/resnapshot", {
      method: "POST", body: "{}", headers: authHeaders({ "Content-Type": "application/json" })
    }).then(function (r) {
      return r.text().then(function (t) { say(t.trim() || ("re-copy of " + name + ": " + r.status), !r.ok); });
    }).catch(function (e) { say("re-copy of " + name + ": " + e.message, true); }).then(refresh);
  }

  document.addEventListener("DOMContentLoaded", function () {
    var pending = null;
    $("filter").addEventListener("input", function (ev) {
      clearTimeout(pending);
      pending = setTimeout(function () { state.filter = ev.target.value.trim(); state.limit = PAGE; refresh(); }, 150);
    });
    $("problems").addEventListener("change", function (ev) { state.problems = ev.target.checked; refresh(); });
    $("more").addEventListener("click", function () { state.limit += PAGE; refresh(); });
    document.querySelector("thead").addEventListener("click", function (ev) {
      var k = ev.target.dataset && ev.target.dataset.sort;
      if (!k) return;
      state.dir = state.sort === k ? -state.dir : (k === "name" || k === "state" ? 1 : -1);
      state.sort = k;
      refresh();
    });
    $("rows").addEventListener("click", function (ev) {
      if (ev.target.classList.contains("recopy")) recopy(ev.target);
    });
    $("auth").addEventListener("submit", function (ev) {
      ev.preventDefault();
      var t = $("token").value.trim();
      $("token").value = "";
      if (t) { sessionStorage.setItem(TOKEN_KEY, t); say("Token kept for this tab."); }
      refresh();
    });
    $("forget-token").addEventListener("click", function () { sessionStorage.removeItem(TOKEN_KEY); say("Token forgotten."); refresh(); });
    refresh();
  });
})();

// gitstate view: the page of `git agentos view` (served by the local server, or inlined in the
// static HTML file of `--html`). No framework, no build step.
//
// Safety: everything shown comes from the store, which may come from an untrusted remote. It is
// put into the page only with DOM APIs (createElement, textContent, setAttribute on plain
// attributes); this file never parses a string as markup or code (no HTML-string setters, no
// dynamic code, no inline handlers), and the links it makes are in-page (#...) only. Data arrives as JSON: from the server's /api/ (server mode) or from the
// JSON data element with id "gitstate-data" (static mode), read with JSON.parse.
"use strict";
(function () {
  const SVGNS = "http://www.w3.org/2000/svg";
  const ROW_H = 26, LANE_W = 14, PAGE = 300, LIST_PAGE = 100, FOLD = 160, AUTO_RUNS = 600, AUTO_ROWS = 1500;

  // ---------------------------------------------------------------- DOM helpers
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === "onclick" || k === "onchange" || k === "oninput" || k === "onkeydown" || k === "ontoggle") {
          el.addEventListener(k.slice(2), v);
        } else if (k === "href") {
          el.setAttribute("href", "#" + String(v).replace(/^#/, ""));
        } else if (k === "checked") {
          el.checked = Boolean(v);
        } else {
          el.setAttribute(k, v === true ? "" : String(v));
        }
      }
    }
    append(el, kids);
    return el;
  }
  function append(el, kids) {
    for (const kid of kids) {
      if (kid === null || kid === undefined || kid === false) continue;
      if (Array.isArray(kid)) append(el, kid);
      else el.appendChild(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
  }
  function add(el, ...kids) { append(el, kids); return el; }
  function svg(tag, attrs) {
    const el = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  }
  function text(s) { return document.createTextNode(String(s)); }
  function own(obj, key) { return obj !== null && typeof obj === "object" && Object.prototype.hasOwnProperty.call(obj, key); }
  function badge(status) { return status ? h("span", { class: "badge st-" + cssWord(status) }, status) : null; }
  function cssWord(s) { return String(s).toLowerCase().replace(/[^a-z0-9-]/g, ""); }
  function when(iso) {
    if (!iso) return "";
    const d = new Date(typeof iso === "number" ? iso * 1000 : iso);
    if (isNaN(d.getTime())) return String(iso);
    const p = n => String(n).padStart(2, "0");
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " + p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  }
  function hashFor(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
    return q.toString();
  }
  function errorBox(err) { return h("div", { class: "error", role: "alert" }, String(err && err.message ? err.message : err)); }

  // ---------------------------------------------------------------- data sources
  class ServerSource {
    constructor() { this.mode = "server"; }
    async get(name, params) {
      const q = new URLSearchParams();
      for (const [k, v] of Object.entries(params || {})) if (v !== null && v !== undefined && v !== "") q.set(k, v);
      const resp = await fetch("/api/" + name + "?" + q.toString(), { credentials: "same-origin", cache: "no-store" });
      const body = await resp.json();
      if (!resp.ok) throw new Error(body && body.error ? body.error : ("HTTP " + resp.status));
      return body;
    }
    runs(o) { return this.get("runs", { q: o.q, cursor: o.cursor, limit: o.limit, all: o.all ? "1" : "" }); }
    graph(run, wt, offset, limit) { return this.get("graph", { run, wt, offset, limit }); }
    nodes(run, wt) { return this.get("nodes", { run, wt }); }
    checkpoint(id) { return this.get("checkpoint", { id }); }
    value(id, path, offset) { return this.get("value", { id, path: JSON.stringify(path), offset }); }
    diff(a, b) { return this.get("diff", { a, b }); }
    file(id, path) { return this.get("file", { id, path }); }
    sessionFiles(run, wt) { return this.get("session-files", { run, wt }); }
    sessionFile(run, wt, path) { return this.get("session-file", { run, wt, path }); }
    async token(run, wt, all) { return (await this.get("token", { run, wt, all: all ? "1" : "" })).token; }
  }

  class StaticSource {
    constructor(bundle) {
      this.mode = "static";
      this.b = bundle;
      this.memo = new Map();
      this.graphs = new Map();
      for (const g of bundle.graphs) this.graphs.set(g.worktree + "\u0000" + g.id, g);
    }
    find(run, wt) {
      const key = (wt || this.b.worktree) + "\u0000" + run;
      let g = this.graphs.get(key);
      if (!g && !wt) for (const [k, v] of this.graphs) if (v.id === run) { g = v; break; }
      if (!g) throw new Error("run " + JSON.stringify(run) + " is not in this file");
      return g;
    }
    async runs(o) {
      const terms = parseQuery(o.q || "");
      const rows = this.b.runs.filter(r => matches(terms, r));
      const start = o.cursor || 0, end = start + (o.limit || 100);
      return { worktree: this.b.worktree, total: this.b.runs.length, runs: rows.slice(start, end), next: end < rows.length ? end : null };
    }
    async graph(run, wt, offset, limit) {
      const g = this.find(run, wt).graph;
      return Object.assign({}, g, { offset, rows: g.rows.slice(offset, offset + limit) });
    }
    async nodes(run, wt) { return { nodes: this.find(run, wt).nodes }; }
    record(id) {
      const rec = own(this.b.checkpoints, id) ? this.b.checkpoints[id] : null;
      if (!rec) throw new Error("checkpoint " + id + " is not in this file");
      if (rec.error) throw new Error(rec.error);
      return rec;
    }
    obj(oid) { return own(this.b.objects, oid) ? this.b.objects[oid] : null; }
    mat(v) {
      // a value with its shared parts ({"$ref": n}) filled in
      if (Array.isArray(v)) return v.map(x => this.mat(x));
      if (v && typeof v === "object") {
        if (own(v, "$ref")) {
          const n = v["$ref"];
          if (!this.memo.has(n)) this.memo.set(n, this.mat(this.b.values[n]));
          return this.memo.get(n);
        }
        if (own(v, "$map")) return Object.assign({}, v, { "$map": v["$map"].map(([k, x]) => [this.mat(k), this.mat(x)]) });
      }
      return v;
    }
    resolve(kind, oid) {
      const o = this.obj(oid);
      if (!o) return { "$other": "missing object " + oid };
      if (o.t === "cbor") return this.mat(o.v);
      if (o.t === "map") return { "$map": o.e.map(([key, k, sub]) => [key, this.resolve(k, sub)]), len: o.e.length };
      if (o.t === "list") {
        const out = [];
        for (const part of o.p) {
          const sub = part.slice(1);
          if (part[0] === "c") { const c = this.obj(sub); if (c) for (const x of c.v) out.push(this.mat(x)); }
          else for (const x of this.resolve("list", sub)) out.push(x);
        }
        return out;
      }
      return { "$other": o.t };
    }
    files(tree, prefix, out) {
      const o = this.obj(tree);
      if (!o) return out;
      for (const [name, type, oid, size, mode] of o.e) {
        if (type === "tree") this.files(oid, prefix + name + "/", out);
        else out.push({ path: prefix + name, size, id: oid, mode });
      }
      return out;
    }
    async checkpoint(id) {
      const rec = this.record(id);
      const out = Object.assign({}, rec);
      out.metadata = this.mat(rec.metadata);
      out.state = rec.state_ref ? this.resolve(rec.state_ref[0], rec.state_ref[1]) : null;
      out.tools = rec.tools_ref ? this.resolve("cbor", rec.tools_ref) : [];
      out.audit = rec.audit_ref ? this.resolve("cbor", rec.audit_ref) : [];
      out.files = rec.files_tree ? this.files(rec.files_tree, "", []).sort((a, b) => a.path < b.path ? -1 : 1) : [];
      out.files_total = out.files.length;
      out.errors = {};
      const commands = rec.langgraph_commands ? this.b.git_checkpoint_langgraph : this.b.git_checkpoint;
      out.git = (commands || []).map(c => ({ label: c.label, command: c.command.split("{id}").join(rec.short) }));
      return out;
    }
    async value() { throw new Error("this static file holds no more of this value"); }
    blob(oid) { return own(this.b.blobs, oid) ? this.b.blobs[oid] : { omitted: true }; }
    async file(id, path) {
      const rec = this.record(id);
      const f = (rec.files_tree ? this.files(rec.files_tree, "", []) : []).find(x => x.path === path);
      if (!f) throw new Error("no file " + path);
      const b = this.blob(f.id);
      return { path, id: f.id, mode: f.mode, size: f.size, binary: Boolean(b.binary), text: b.text === undefined ? null : b.text,
        hex: b.hex || null, omitted: Boolean(b.omitted), truncated: false,
        git: [{ label: "this file", command: "git show " + id.slice(0, 12) + ":files/" + path }] };
    }
    async diff(a, b) {
      let ra, rb = this.record(b || a);
      if (!b) {
        const parent = rb.parents && rb.parents[0];
        ra = parent && own(this.b.checkpoints, parent) ? this.record(parent) : null;
      } else ra = this.record(a);
      return staticDiff(this, ra, rb);
    }
    async sessionFiles(run, wt) { return this.find(run, wt).session_files; }
    async sessionFile(run, wt, path) {
      const files = this.find(run, wt).session_file;
      if (!own(files, path)) throw new Error("no session file " + path);
      return files[path];
    }
    async token() { return null; }
  }

  // ---------------------------------------------------------------- runs filter (static mode)
  function parseQuery(q) {
    return q.toLowerCase().split(/\s+/).filter(Boolean).map(w => {
      const i = w.indexOf(":");
      const f = i > 0 ? w.slice(0, i) : "";
      if (["id", "workflow", "status", "node", "worktree", "wt", "branch"].includes(f) && w.length > i + 1) return [f === "wt" ? "worktree" : f, w.slice(i + 1)];
      return [null, w];
    });
  }
  function matches(terms, row) {
    for (const [f, w] of terms) {
      if (f === null) { if (!String(row.search || "").includes(w)) return false; }
      else if (row[f] === null || row[f] === undefined || !String(row[f]).toLowerCase().includes(w)) return false;
    }
    return true;
  }

  // ---------------------------------------------------------------- diffs in the browser (static mode)
  const isMap = v => v !== null && typeof v === "object" && !Array.isArray(v) && own(v, "$map");
  const canon = v => JSON.stringify(v);
  function changes(oldV, newV, path, depth) {
    if (canon(oldV) === canon(newV)) return [];
    if (isMap(oldV) && isMap(newV) && depth < 6 && !oldV.more && !newV.more) {
      const a = new Map(oldV["$map"].map(([k, v]) => [canon(k), [k, v]]));
      const b = new Map(newV["$map"].map(([k, v]) => [canon(k), [k, v]]));
      const keys = Array.from(new Set([...a.keys(), ...b.keys()])).sort();
      const out = [];
      for (const key of keys) {
        if (!b.has(key)) out.push({ path: path.concat([a.get(key)[0]]), kind: "removed", old: a.get(key)[1] });
        else if (!a.has(key)) out.push({ path: path.concat([b.get(key)[0]]), kind: "added", new: b.get(key)[1] });
        else out.push(...changes(a.get(key)[1], b.get(key)[1], path.concat([a.get(key)[0]]), depth + 1));
      }
      return out;
    }
    if (Array.isArray(oldV) && Array.isArray(newV)) {
      const n = Math.min(oldV.length, newV.length);
      let prefix = true;
      for (let i = 0; i < n && prefix; i++) if (canon(oldV[i]) !== canon(newV[i])) prefix = false;
      if (prefix) {
        if (newV.length > oldV.length) return [{ path, kind: "appended", items: newV.slice(n), start: n }];
        return [{ path, kind: "truncated", items: oldV.slice(n), start: n }];
      }
    }
    return [{ path, kind: "changed", old: oldV, new: newV }];
  }
  function label(rec) {
    return { id: rec.id, short: rec.short, run: rec.run, branch: rec.branch, node: rec.node, step: rec.step,
      trigger: rec.trigger, status: rec.status, node_status: rec.node_status, created_at: rec.created_at };
  }
  function staticDiff(src, ra, rb) {
    const state = [];
    const sa = ra && ra.state_ref, sb = rb.state_ref;
    if (sa && sb && sa[0] === "map" && sb[0] === "map") {
      if (sa[1] !== sb[1]) {
        const ea = new Map(src.obj(sa[1]).e.map(([k, kind, oid]) => [k, [kind, oid]]));
        const eb = new Map(src.obj(sb[1]).e.map(([k, kind, oid]) => [k, [kind, oid]]));
        for (const key of Array.from(new Set([...ea.keys(), ...eb.keys()])).sort()) {
          const x = ea.get(key), y = eb.get(key);
          if (x && y && x[1] === y[1]) continue;
          if (!y) state.push({ path: [key], kind: "removed", old: src.resolve(x[0], x[1]) });
          else if (!x) state.push({ path: [key], kind: "added", new: src.resolve(y[0], y[1]) });
          else state.push(...changes(src.resolve(x[0], x[1]), src.resolve(y[0], y[1]), [key], 1));
        }
      }
    } else if (!ra) {
      const v = sb ? src.resolve(sb[0], sb[1]) : null;
      if (isMap(v)) for (const [k, x] of v["$map"]) state.push({ path: [k], kind: "added", new: x });
      else state.push({ path: [], kind: "added", new: v });
    } else {
      state.push(...changes(sa ? src.resolve(sa[0], sa[1]) : null, sb ? src.resolve(sb[0], sb[1]) : null, [], 0));
    }
    const files = [];
    const fa = ra ? ra.files_tree : null, fb = rb.files_tree;
    if (fa !== fb) treeDiff(src, fa, fb, "", files);
    files.sort((x, y) => x.path < y.path ? -1 : 1);
    return { a: ra ? label(ra) : null, b: label(rb), state, files, files_compared: Boolean(fa || fb),
      git: ra ? [{ label: "the same diff", command: "git diff --stat " + ra.short + " " + rb.short + " -- state files" }] : [] };
  }
  function treeDiff(src, ta, tb, prefix, out) {
    const ea = new Map(), eb = new Map();
    if (ta && src.obj(ta)) for (const e of src.obj(ta).e) ea.set(e[0], e);
    if (tb && src.obj(tb)) for (const e of src.obj(tb).e) eb.set(e[0], e);
    for (const name of new Set([...ea.keys(), ...eb.keys()])) {
      const x = ea.get(name), y = eb.get(name);
      if (x && y && x[2] === y[2]) continue;
      const xt = x && x[1] === "tree", yt = y && y[1] === "tree";
      if (xt || yt) treeDiff(src, xt ? x[2] : null, yt ? y[2] : null, prefix + name + "/", out);
      if ((x && !xt) || (y && !yt)) {
        const old = x && !xt ? x : null, neu = y && !yt ? y : null;
        const status = !old ? "added" : !neu ? "deleted" : "modified";
        const item = { path: prefix + name, status, old_path: null, old_size: old ? old[3] : null, new_size: neu ? neu[3] : null,
          binary: false, diff: null, too_large: false };
        const bo = old ? src.blob(old[2]) : { text: "" }, bn = neu ? src.blob(neu[2]) : { text: "" };
        if (bo.omitted || bn.omitted) item.omitted = true;
        else if (bo.binary || bn.binary) item.binary = true;
        else {
          const d = unifiedDiff(bo.text || "", bn.text || "", old ? "a/" + item.path : "/dev/null", neu ? "b/" + item.path : "/dev/null");
          if (d === null) item.too_large = true; else item.diff = d;
        }
        out.push(item);
      }
    }
  }
  // Myers' O(ND) line diff, printed as a unified diff with 3 lines of context.
  function unifiedDiff(a, b, nameA, nameB) {
    const A = splitLines(a), B = splitLines(b);
    const N = A.length, M = B.length, MAX = N + M;
    if (MAX > 40000) return null;
    const V = new Map([[1, 0]]), trace = [];
    let found = false;
    for (let d = 0; d <= MAX && !found; d++) {
      if (d > 4000) return null;
      trace.push(new Map(V));
      for (let k = -d; k <= d; k += 2) {
        let x = (k === -d || (k !== d && (V.get(k - 1) ?? -1) < (V.get(k + 1) ?? -1))) ? (V.get(k + 1) ?? 0) : (V.get(k - 1) ?? 0) + 1;
        let y = x - k;
        while (x < N && y < M && A[x] === B[y]) { x++; y++; }
        V.set(k, x);
        if (x >= N && y >= M) { found = true; break; }
      }
    }
    const ops = [];
    let x = N, y = M;
    for (let d = trace.length - 1; d >= 0; d--) {
      const Vd = trace[d], k = x - y;
      const prevK = (k === -d || (k !== d && (Vd.get(k - 1) ?? -1) < (Vd.get(k + 1) ?? -1))) ? k + 1 : k - 1;
      const prevX = Vd.get(prevK) ?? 0, prevY = prevX - prevK;
      while (x > prevX && y > prevY) { ops.push([" ", A[x - 1]]); x--; y--; }
      if (d > 0) { if (x === prevX) ops.push(["+", B[y - 1]]); else ops.push(["-", A[x - 1]]); }
      x = prevX; y = prevY;
    }
    ops.reverse();
    if (!ops.some(o => o[0] !== " ")) return "";
    const lines = ["--- " + nameA, "+++ " + nameB];
    let i = 0;
    while (i < ops.length) {
      while (i < ops.length && ops[i][0] === " ") i++;
      if (i >= ops.length) break;
      let start = Math.max(0, i - 3), end = i;
      while (end < ops.length) {
        if (ops[end][0] !== " ") { end++; continue; }
        let run = 0; while (end + run < ops.length && ops[end + run][0] === " ") run++;
        if (end + run >= ops.length || run > 6) { end = Math.min(ops.length, end + 3); break; }
        end += run;
      }
      let oa = 0, ob = 0;
      for (let j = 0; j < start; j++) { if (ops[j][0] !== "+") oa++; if (ops[j][0] !== "-") ob++; }
      let la = 0, lb = 0;
      for (let j = start; j < end; j++) { if (ops[j][0] !== "+") la++; if (ops[j][0] !== "-") lb++; }
      lines.push("@@ -" + (la ? oa + 1 : oa) + "," + la + " +" + (lb ? ob + 1 : ob) + "," + lb + " @@");
      for (let j = start; j < end; j++) lines.push(ops[j][0] + ops[j][1]);
      i = end;
    }
    return lines.join("\n") + "\n";
  }
  function splitLines(s) { if (!s) return []; const l = s.split("\n"); if (l[l.length - 1] === "") l.pop(); return l; }

  // ---------------------------------------------------------------- values as collapsible trees
  function pathText(path) {
    let out = "";
    for (const p of path) {
      if (typeof p === "number") out += "[" + p + "]";
      else if (typeof p === "string") out += (out ? "." : "") + p;
      else out += "[" + scalarText(p) + "]";
    }
    return out || "(whole state)";
  }
  function scalarText(v) {
    if (v === null) return "null";
    if (typeof v === "string") return JSON.stringify(v);
    if (typeof v !== "object") return String(v);
    if (own(v, "$int")) return v["$int"];
    if (own(v, "$bigint")) return bigintText(v);
    if (own(v, "$float")) return v["$float"];
    if (own(v, "$bytes")) return "bytes(" + v["$bytes"] + ")";
    return "…";
  }
  function bigintText(v) { return "integer of " + Number(v["$bigint"]).toLocaleString("en-US") + " bits: " + String(v.hex || ""); }
  function kindOf(v) {
    if (v === null) return "null";
    if (Array.isArray(v)) return "list";
    if (typeof v === "object") {
      for (const t of ["$map", "$list", "$str", "$bytes", "$int", "$bigint", "$float", "$more", "$other"]) if (own(v, t)) return t.slice(1);
      return "other";
    }
    return typeof v;
  }
  // ctx: { src, id, root: [path prefix] or null } lets truncated parts be fetched (server mode)
  function renderValue(v, ctx, path, depth) {
    const k = kindOf(v);
    const wrap = h("div", { class: "v" });
    if (k === "map" || k === "list" || (k === "$list")) { wrap.appendChild(renderContainer(v, ctx, path, depth)); return wrap; }
    wrap.appendChild(renderScalar(v, ctx, path));
    return wrap;
  }
  function renderScalar(v, ctx, path) {
    const k = kindOf(v);
    if (k === "null") return h("span", { class: "null" }, "null");
    if (k === "boolean") return h("span", { class: "b" }, String(v));
    if (k === "number") return h("span", { class: "n" }, String(v));
    if (k === "int" || k === "float") return h("span", { class: "n" }, v["$" + k]);
    if (k === "bigint") return h("span", { class: "n" }, bigintText(v));
    if (k === "bytes") return h("span", { class: "bytes" }, "bytes · " + v["$bytes"] + " B · " + (v.hex || "") + (v["$bytes"] * 2 > (v.hex || "").length ? "…" : ""));
    if (k === "other") return h("span", { class: "type" }, "(" + (v["$other"] || "?") + ")");
    if (k === "more") return h("span", { class: "type" }, "(nested too deep to show)");
    if (k === "string" || k === "str") return renderString(k === "str" ? v["$str"] : v, k === "str" ? v.len : v.length, ctx, path);
    return h("span", { class: "type" }, "(?)");
  }
  function renderString(s, total, ctx, path) {
    const partial = total > s.length;
    if (!partial && s.length <= FOLD && !s.includes("\n")) return h("span", { class: "s" }, JSON.stringify(s));
    const details = h("details", { class: "str" });
    details.appendChild(h("summary", null, h("span", { class: "s" }, JSON.stringify(s.slice(0, 80).replace(/\n/g, " ")) + (s.length > 80 ? "…" : "")),
      h("span", { class: "type" }, " text · " + total + " chars")));
    const pre = h("pre", { class: "longstr s" }, s);
    details.appendChild(pre);
    if (partial) {
      if (ctx && ctx.src && ctx.src.mode === "server" && ctx.id && path) {
        details.appendChild(h("button", { onclick: async (e) => {
          try { const r = await ctx.src.value(ctx.id, path, 0); pre.textContent = r.value; e.target.remove(); } catch (err) { details.appendChild(errorBox(err)); }
        } }, "load all " + total + " chars"));
      } else details.appendChild(h("div", { class: "note" }, "shortened to " + s.length + " of " + total + " characters in this file"));
    }
    return details;
  }
  function renderContainer(v, ctx, path, depth) {
    const isList = Array.isArray(v) || own(v, "$list");
    const items = Array.isArray(v) ? v : isList ? v["$list"] : v["$map"];
    const total = Array.isArray(v) ? v.length : (v.len !== undefined ? v.len : items.length);
    const details = h("details", { class: isList ? "list" : "map" });
    if (depth < 2 || (depth < 4 && total <= 12)) details.open = true;
    details.appendChild(h("summary", null, h("span", { class: "type" }, (isList ? "list · " + total + " item" : "map · " + total + " key") + (total === 1 ? "" : "s"))));
    const kids = h("div", { class: "kids" });
    details.appendChild(kids);
    let shown = 0;
    const addItems = (list, offset) => {
      for (let i = 0; i < list.length; i++) {
        const idx = offset + i;
        let keyEl, val, childPath;
        if (isList) { val = list[i]; keyEl = h("span", { class: "idx" }, "[" + idx + "] "); childPath = path ? path.concat([idx]) : null; }
        else { const [kk, vv] = list[i]; val = vv; keyEl = h("span", { class: "key" }, (typeof kk === "string" ? kk : scalarText(kk)) + ": "); childPath = path && typeof kk !== "object" ? path.concat([kk]) : null; }
        const kind = kindOf(val);
        const line = h("div", { class: "kv" });
        if (kind === "map" || kind === "list" || kind === "$list") {
          const inner = renderContainer(val, ctx, childPath, depth + 1);
          inner.querySelector("summary").prepend(keyEl);
          line.appendChild(inner);
        } else { line.appendChild(keyEl); line.appendChild(renderScalar(val, ctx, childPath)); }
        kids.appendChild(line);
      }
    };
    let more = null;
    const canFetch = () => Boolean(ctx && ctx.src && ctx.src.mode === "server" && ctx.id && path);
    const moreButton = () => {
      if (more) more.remove();
      more = null;
      if (shown >= total) return;
      more = shown < items.length || canFetch()
        ? h("button", { class: "morebtn", onclick: () => showMore().catch(e => kids.appendChild(errorBox(e))) }, "show " + Math.min(LIST_PAGE, total - shown) + " more of " + total)
        : h("div", { class: "note" }, (total - shown) + " more not in this file");
      kids.appendChild(more);
    };
    const showMore = async () => {
      if (shown < items.length) {
        const next = items.slice(shown, shown + LIST_PAGE);
        addItems(next, shown); shown += next.length;
      } else if (canFetch()) {
        const r = await ctx.src.value(ctx.id, path, shown);
        addItems(r.value, shown); shown += r.value.length;
        if (!r.value.length) shown = total;
      }
      moreButton();
    };
    const first = items.slice(0, LIST_PAGE);
    addItems(first, 0); shown = first.length;
    moreButton();
    return details;
  }

  // ---------------------------------------------------------------- app state and router
  const app = { src: null, root: null, header: null, view: null, run: null, poll: null, runsState: null };

  function params() { return new URLSearchParams(location.hash.replace(/^#/, "")); }
  function go(p) { location.hash = hashFor(p); }

  function frame() {
    app.root.replaceChildren();
    const crumbs = h("div", { class: "crumbs" });
    const live = h("span", { class: "live" + (app.src.mode === "server" ? " on" : "") }, app.src.mode === "server" ? "live" : "static file");
    app.header = h("header", { class: "top" }, h("span", { class: "brand" }, "gitstate"),
      h("a", { href: "", id: "nav-runs" }, "Runs"), crumbs, h("span", { class: "spacer" }), live);
    app.crumbs = crumbs;
    app.view = h("div", { id: "view" });
    app.root.append(app.header, app.view);
  }

  async function route() {
    const p = params();
    const run = p.get("run");
    if (!run) { app.run = null; stopPoll(); return renderRuns(p); }
    const key = (p.get("wt") || "") + "\u0000" + run;
    if (!app.run || app.run.key !== key) await renderRun(p, key);
    else await renderDetail(p);
  }

  function stopPoll() { if (app.poll) { clearInterval(app.poll); app.poll = null; } }
  function startPoll(fn, ms) {
    stopPoll();
    if (app.src.mode !== "server") return;
    let busy = false;
    app.poll = setInterval(async () => {
      if (busy) return; busy = true;
      try { await fn(); } catch (e) { /* the next poll tries again */ } finally { busy = false; }
    }, ms);
  }

  // ---------------------------------------------------------------- runs page
  async function renderRuns(p) {
    app.crumbs.replaceChildren();
    document.title = "gitstate · runs";
    const q = p.get("q") || "", all = p.get("all") === "1";
    const page = h("div", { class: "page", id: "runs-page" });
    const input = h("input", { type: "search", id: "filter", placeholder: "filter: id, workflow, status:failed, metadata text …", "aria-label": "filter runs", value: q });
    const allBox = h("input", { type: "checkbox", id: "all-worktrees", checked: all });
    const count = h("span", { class: "muted", id: "runs-count" });
    page.appendChild(h("div", { class: "toolbar" }, input, h("label", null, allBox, " all worktrees"), count));
    const tbody = h("tbody");
    const head = ["Run", "Workflow", "Status", "Node", "Step", "Checkpoints", "Branches", "Updated", "Metadata"];
    if (all) head.splice(1, 0, "Worktree");
    page.appendChild(h("table", { class: "runs", id: "runs" }, h("thead", null, h("tr", null, head.map(x => h("th", null, x)))), tbody));
    const more = h("div", { class: "more" });
    page.appendChild(more);
    app.view.replaceChildren(page);
    let timer = null;
    input.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => go({ q: input.value, all: all ? "1" : "" }), 250); });
    allBox.addEventListener("change", () => go({ q: input.value, all: allBox.checked ? "1" : "" }));
    if (q) { input.focus(); input.setSelectionRange(q.length, q.length); }
    let next = 0, shown = 0;
    const load = async (reset) => {
      if (reset) { next = 0; shown = 0; }
      const limit = reset && app.runsState ? Math.max(100, app.runsState) : 100;
      const rows = [];
      let r;
      do {
        r = await app.src.runs({ q, cursor: next, limit, all });
        rows.push(...r.runs); next = r.next;
        if (r.worktree) app.worktree = r.worktree;
      } while (rows.length < limit && next !== null && q);
      if (reset) tbody.replaceChildren();
      for (const run of rows) tbody.appendChild(runRow(run, all));
      shown += rows.length; app.runsState = shown;
      count.textContent = shown + (next !== null ? "+" : "") + " of " + r.total + " runs" + (q ? " (filtered)" : "");
      more.replaceChildren();
      if (next !== null) more.appendChild(h("button", { id: "more-runs", onclick: () => load(false).catch(e => more.appendChild(errorBox(e))) }, "more runs"));
      // a store of a few hundred runs shows them all (the first page is shown while the rest load)
      if (next !== null && r.total <= AUTO_RUNS && !q) setTimeout(() => load(false).catch(() => {}), 0);
    };
    let token = null;
    try { token = await app.src.token(null, null, all); await load(true); } catch (e) { page.appendChild(errorBox(e)); }
    startPoll(async () => {
      const t = await app.src.token(null, null, all);
      if (t !== token) await load(true);
      token = t;
    }, 2000);
  }
  function runRow(r, all) {
    const link = h("a", { href: hashFor({ run: r.id, wt: r.worktree !== app.worktree ? r.worktree : "" }), class: "run-link", "data-run": r.id }, r.id);
    const meta = r.metadata && r.metadata["$map"] ? r.metadata["$map"].map(([k, v]) => scalarText(k).replace(/^"|"$/g, "") + "=" + (kindOf(v) === "map" || kindOf(v) === "list" ? "…" : scalarText(v))).join(" ") : "";
    const cells = [h("td", null, link), h("td", null, r.workflow || ""), h("td", null, badge(r.status)), h("td", null, r.node || ""),
      h("td", null, r.step === null ? "" : String(r.step)), h("td", null, String(r.checkpoints)), h("td", null, String(r.branches)),
      h("td", null, when(r.updated_at)), h("td", { class: "meta", title: meta }, meta)];
    if (all) cells.splice(1, 0, h("td", null, r.worktree));
    const tr = h("tr", { "data-run": r.id }, cells);
    if (r.error) tr.title = r.error;
    return tr;
  }

  // ---------------------------------------------------------------- run page: graph
  async function renderRun(p, key) {
    stopPoll();
    const run = p.get("run"), wt = p.get("wt") || null;
    const st = { key, run, wt, rows: [], total: 0, width: 1, nodes: [], picked: [], current: null, byId: new Map(), graph: null, spanCols: 0 };
    app.run = st;
    document.title = "gitstate · " + run;
    app.crumbs.replaceChildren(text("/"), h("a", { href: hashFor({ run, wt }), class: "mono" }, run));
    const headBox = h("div", { class: "run-head" });
    const pane = h("div", { class: "graph-pane", id: "graph" });
    const detail = h("div", { class: "detail-pane", id: "detail" });
    st.headBox = headBox; st.pane = pane; st.detail = detail;
    app.view.replaceChildren(headBox, h("div", { class: "split" }, pane, detail));
    let token = null;
    try {
      token = await app.src.token(run, wt, false);  // before the graph: a write in between shows on the next poll
      const g = await app.src.graph(run, wt, 0, PAGE);
      st.graph = g;
      renderRunHead(st, g);
      st.info = h("div", { class: "graph-info" });
      st.list = h("div", { class: "rows", id: "rows" });
      st.more = h("div", { class: "more" });
      pane.replaceChildren(st.info, st.list, st.more);
      st.total = g.total; st.width = Math.max(1, g.width);
      addRows(st, g.rows, false);
      updateInfo(st);
      loadNodes(st);
      if (st.total <= AUTO_ROWS) setTimeout(() => loadAll(st), 0);
    } catch (e) { pane.replaceChildren(errorBox(e)); return; }
    await renderDetail(p);
    startPoll(async () => {
      const t = await app.src.token(run, wt, false);
      if (t !== token) await refreshGraph(st);
      token = t;
    }, 1500);
  }
  function renderRunHead(st, g) {
    const r = g.run;
    const chips = h("div", { class: "chips", id: "branches" });
    for (const b of g.branches) chips.appendChild(h("span", { class: "chip " + cssWord(b.kind), title: b.ref, "data-branch": b.name }, b.name));
    if (g.reflog_lines) chips.appendChild(h("span", { class: "chip reflog", title: "lines that only the reflog holds (rolled back or pruned)" }, g.reflog_lines + " rolled-back line" + (g.reflog_lines > 1 ? "s" : "") + " (reflog)"));
    const tab = params().get("tab") || "graph";
    const tabs = h("div", { class: "tabs" },
      h("a", { href: hashFor({ run: st.run, wt: st.wt }), class: tab === "graph" ? "on" : "" }, "Graph"),
      h("a", { href: hashFor({ run: st.run, wt: st.wt, tab: "files" }), class: tab === "files" ? "on" : "", id: "tab-files" }, "Session files"));
    st.tabs = tabs;
    st.headBox.replaceChildren(h("h1", null, r.id),
      h("div", { class: "muted" }, (r.workflow ? "workflow " + r.workflow + " · " : "") + "worktree " + r.worktree + " · created " + when(r.created_at)),
      chips, tabs);
  }
  function updateInfo(st) {
    st.info.replaceChildren();
    add(st.info, h("span", null, st.rows.length + " of " + st.total + " checkpoints"),
      h("span", null, "tick two to compare"),
      st.picked.length ? h("button", { onclick: () => { st.picked = []; syncPicks(st); } }, "clear selection") : null);
    st.more.replaceChildren();
    if (st.rows.length < st.total) st.more.appendChild(h("button", { id: "more-rows", onclick: () => loadMore(st) }, "load " + Math.min(PAGE, st.total - st.rows.length) + " more"));
  }
  async function loadMore(st) {
    try {
      const g = await app.src.graph(st.run, st.wt, st.rows.length, PAGE);
      st.total = g.total; st.width = Math.max(st.width, g.width);
      addRows(st, g.rows, false);
      updateInfo(st); drawSpans(st);
    } catch (e) { st.more.appendChild(errorBox(e)); }
  }
  async function loadAll(st) {
    // a run of up to AUTO_ROWS checkpoints is shown whole; a longer one pages on request
    while (app.run === st && st.rows.length < st.total) {
      const n = st.rows.length;
      await loadMore(st);
      if (st.rows.length === n) break;
    }
  }
  async function refreshGraph(st) {
    const g = await app.src.graph(st.run, st.wt, 0, Math.max(PAGE, st.rows.length));
    const before = new Set(st.rows.map(r => r.id));
    st.graph = g; st.total = g.total; st.width = Math.max(1, g.width);
    st.rows = []; st.byId = new Map(); st.list.replaceChildren();
    renderRunHead(st, g);
    addRows(st, g.rows, before);
    updateInfo(st); syncPicks(st);
    await loadNodes(st);
  }
  function addRows(st, rows, before) {
    for (const row of rows) {
      const el = rowEl(st, row);
      if (before && !before.has(row.id)) el.classList.add("fresh");
      st.byId.set(row.id, { row, el, index: st.rows.length });
      st.rows.push(row);
      st.list.appendChild(el);
    }
    markCurrent(st);
  }
  function rowEl(st, row) {
    const box = h("input", { type: "checkbox", class: "pick", title: "select for diff", "aria-label": "select " + row.short + " for diff", checked: st.picked.includes(row.id) });
    box.addEventListener("click", e => { e.stopPropagation(); togglePick(st, row.id); });
    const lanes = drawLanes(row, st.width);
    const spans = h("div", { class: "spans" });
    const refs = (row.refs || []).map(r => h("span", { class: "chip " + cssWord(r.kind), title: r.message || r.name }, r.name));
    const failed = row.node_status === "failed" || row.status === "failed";
    const parts = [];
    if (row.step !== null && row.step !== undefined) parts.push("step " + row.step);
    if (row.node) parts.push(row.node);
    if (row.trigger) parts.push(row.trigger);
    const labelText = parts.length ? parts.join(" · ") : row.subject;
    const el = h("div", { class: "row" + (row.reflog ? " dimmed" : ""), "data-id": row.id, "data-short": row.short, title: row.id + (row.reflog ? " (only in the reflog)" : "") },
      box, lanes, spans, h("span", { class: "short" }, row.short), refs,
      h("span", { class: "label" }, labelText), row.status ? badge(row.status) : null,
      failed ? h("span", { class: "chip failed" }, "failed") : null,
      row.langgraph ? h("span", { class: "chip langgraph", title: "LangGraph checkpoint id" }, "lg " + row.langgraph.slice(-8)) : null,
      h("span", { class: "time" }, when(row.time)));
    el.addEventListener("click", (e) => {
      if (e.shiftKey || e.ctrlKey || e.metaKey) { togglePick(st, row.id); return; }
      go({ run: st.run, wt: st.wt, cp: row.id });
    });
    return el;
  }
  function drawLanes(row, width) {
    const W = 8 + width * LANE_W, mid = ROW_H / 2, x = c => 8 + c * LANE_W;
    const s = svg("svg", { width: W, height: ROW_H, viewBox: "0 0 " + W + " " + ROW_H, "aria-hidden": "true", class: "lanes" });
    for (const [a, b, k] of row.up) s.appendChild(svg("path", { d: "M" + x((a + b) / 2) + " 0 L" + x(b) + " " + mid, class: "edge lane-" + (a % 8) + (k ? " dim" : "") }));
    for (const [a, b, k] of row.down) s.appendChild(svg("path", { d: "M" + x(a) + " " + mid + " L" + x((a + b) / 2) + " " + ROW_H, class: "edge lane-" + (a % 8) + (k ? " dim" : "") }));
    const tip = (row.refs || []).length > 0;
    s.appendChild(svg("circle", { cx: x(row.col), cy: mid, r: 4.5, class: "dot lane-" + (row.col % 8) + (tip ? " tip" : "") + (row.reflog ? " dim" : "") }));
    return s;
  }
  async function loadNodes(st) {
    try { st.nodes = (await app.src.nodes(st.run, st.wt)).nodes; drawSpans(st); } catch (e) { /* spans are optional */ }
  }
  function drawSpans(st) {
    const spans = [];
    for (const n of st.nodes) {
      const tipIdx = (() => { const b = st.graph.branches.find(x => x.name === n.branch); return b && st.byId.has(b.tip) ? st.byId.get(b.tip).index : null; })();
      const top = n.exit && st.byId.has(n.exit) ? st.byId.get(n.exit).index : (!n.exit ? tipIdx : null);
      if (top === null) continue;
      const bottom = n.entry && st.byId.has(n.entry) ? st.byId.get(n.entry).index : (n.entry ? st.rows.length - 1 : top);
      spans.push({ n, top: Math.min(top, bottom), bottom: Math.max(top, bottom) });
    }
    spans.sort((a, b) => a.top - b.top || b.bottom - a.bottom);
    const colEnd = [];
    for (const s of spans) {
      let c = colEnd.findIndex(e => e < s.top);
      if (c < 0) { c = colEnd.length; colEnd.push(0); }
      colEnd[c] = s.bottom; s.col = c;
    }
    const cols = Math.min(colEnd.length, 6);
    for (const { el } of st.byId.values()) { const box = el.querySelector(".spans"); box.replaceChildren(); box.style.width = (cols * 7 + 2) + "px"; }
    for (const s of spans) {
      if (s.col >= cols) continue;
      for (let i = s.top; i <= s.bottom; i++) {
        const row = st.rows[i]; if (!row) continue;
        const box = st.byId.get(row.id).el.querySelector(".spans");
        const bar = h("div", { class: "bar " + cssWord(s.n.status) + (i === s.top ? " first" : "") + (i === s.bottom ? " last" : ""), title: "node " + s.n.node + " · " + s.n.status, "data-node": s.n.node });
        bar.style.left = (s.col * 7 + 1) + "px";
        box.appendChild(bar);
      }
    }
  }
  function togglePick(st, id) {
    const i = st.picked.indexOf(id);
    if (i >= 0) st.picked.splice(i, 1);
    else { st.picked.push(id); if (st.picked.length > 2) st.picked.shift(); }
    syncPicks(st);
    if (st.picked.length === 2) {
      const [x, y] = st.picked.slice().sort((p, q) => (st.byId.get(q).index - st.byId.get(p).index));
      go({ run: st.run, wt: st.wt, a: x, b: y });
    }
  }
  function syncPicks(st) {
    for (const [id, { el }] of st.byId) {
      const on = st.picked.includes(id);
      el.classList.toggle("picked", on);
      el.querySelector("input.pick").checked = on;
    }
    updateInfo(st);
  }
  function markCurrent(st) {
    for (const [id, { el }] of st.byId) el.classList.toggle("current", id === st.current);
  }

  // ---------------------------------------------------------------- run page: detail panel
  async function renderDetail(p) {
    const st = app.run;
    if (!st) return;
    const tab = p.get("tab") || "graph";
    if (st.tabs) for (const a of st.tabs.querySelectorAll("a")) a.classList.toggle("on", (a.id === "tab-files") === (tab === "files"));
    const detail = st.detail;
    const a = p.get("a"), b = p.get("b"), cp = p.get("cp");
    st.current = cp || b || null; markCurrent(st);
    if (a || b) { st.picked = [a, b].filter(Boolean); syncPicks(st); }
    detail.replaceChildren(h("div", { class: "muted" }, "loading …"));
    try {
      if (tab === "files") detail.replaceChildren(await sessionFilesView(st, p.get("file")));
      else if (a && b) detail.replaceChildren(diffView(await app.src.diff(a, b)));
      else if (p.get("diff")) detail.replaceChildren(diffView(await app.src.diff(p.get("diff"), null)));
      else if (cp) detail.replaceChildren(checkpointView(await app.src.checkpoint(cp), st));
      else {
        const tip = st.rows.find(r => !r.reflog);
        detail.replaceChildren(h("div", { class: "detail" }, h("h2", null, "Run " + st.run),
          h("p", { class: "muted" }, "Click a checkpoint to see its state, metadata, tools, audit events and files; tick two to see their diff. Branch tips carry their names; dashed lines are rolled back (kept in the reflog); bars left of the ids span the checkpoints of each node (red: failed)."),
          tip ? h("button", { onclick: () => go({ run: st.run, wt: st.wt, cp: tip.id }) }, "show the newest checkpoint") : null,
          commands(st.graph ? st.graph.git : [])));
      }
    } catch (e) { detail.replaceChildren(errorBox(e)); }
  }
  function field(name, value) { return value === null || value === undefined || value === "" ? null : h("tr", null, h("td", null, name), h("td", null, value)); }
  function section(title, body, open, id) {
    const d = h("details", { class: "section", id: id || null });
    if (open) d.open = true;
    d.append(h("summary", null, title), h("div", { class: "body" }, body));
    return d;
  }
  function commands(list) {
    if (!list || !list.length) return null;
    return section("Plain git", h("div", { class: "cmds" }, list.map(c => h("div", null, h("div", { class: "what" }, c.label), h("code", null, c.command)))), false, "git-commands");
  }
  function checkpointView(c, st) {
    const ctx = { src: app.src, id: c.id };
    const parents = (c.parents || []).map(pid => h("a", { href: hashFor({ run: st.run, wt: st.wt, cp: pid }), class: "mono" }, pid.slice(0, 12)));
    const out = h("div", { class: "detail", id: "checkpoint", "data-id": c.id });
    out.append(h("h2", null, "Checkpoint ", h("span", { class: "mono" }, c.short)), h("div", { class: "fullid" }, c.id));
    out.appendChild(h("table", { class: "fields" }, h("tbody", null,
      field("run", c.run), field("branch", c.branch), field("step", String(c.step)), field("node", c.node),
      field("trigger", c.trigger), field("status", c.status ? badge(c.status) : null), field("node status", c.node_status ? badge(c.node_status) : null),
      field("node entry", c.node_entry ? c.node_entry.slice(0, 12) : null), field("created", when(c.created_at)),
      field("parent", parents.length ? parents : "none (first checkpoint)"), field("workflow", c.workflow))));
    out.appendChild(h("div", { class: "actions" },
      c.parents && c.parents.length ? h("button", { id: "diff-parent", onclick: () => go({ run: st.run, wt: st.wt, a: c.parents[0], b: c.id }) }, "diff with parent") : null));
    for (const [name, msg] of Object.entries(c.errors || {})) out.appendChild(h("div", { class: "error" }, name + ": " + msg));
    const changes = h("div", { class: "muted" }, "loading …");
    out.appendChild(section(c.parents && c.parents.length ? "Changes since its parent" : "What it starts with", changes, true, "parent-diff"));
    app.src.diff(c.id, null).then(d => changes.replaceWith(diffBody(h("div", { class: "parent-diff" }), d)), e => changes.replaceWith(errorBox(e)));
    out.appendChild(section("State", renderValue(c.state, ctx, [], 0), true, "state"));
    out.appendChild(section("Metadata", renderValue(c.metadata, ctx, ["$metadata"], 1), true, "metadata"));
    if (kindOf(c.tools) !== "list" || c.tools.length) out.appendChild(section("Tool invocations", renderValue(c.tools, ctx, ["$tools"], 1), true, "tools"));
    if (kindOf(c.audit) !== "list" || c.audit.length) out.appendChild(section("Audit events", renderValue(c.audit, ctx, ["$audit"], 1), true, "audit"));
    out.appendChild(section("Workspace files" + (c.files_tree ? " (" + c.files_total + ")" : ""), filesView(c), Boolean(c.files_tree), "files"));
    add(out, commands(c.git));
    return out;
  }
  function filesView(c) {
    if (!c.files_tree) return h("div", { class: "muted" }, "no workspace snapshot in this checkpoint");
    const root = { dirs: new Map(), files: [] };
    for (const f of c.files) {
      const parts = f.path.split("/");
      let node = root;
      for (const part of parts.slice(0, -1)) { if (!node.dirs.has(part)) node.dirs.set(part, { dirs: new Map(), files: [] }); node = node.dirs.get(part); }
      node.files.push(f);
    }
    const box = h("div", { class: "filebox-holder" });
    const build = (node, depth) => {
      const out = [];
      for (const [name, sub] of [...node.dirs].sort()) {
        const d = h("details", { class: "dir" });
        if (depth < 1) d.open = true;
        d.append(h("summary", null, name + "/"), h("div", { class: "kids" }, build(sub, depth + 1)));
        out.push(d);
      }
      for (const f of node.files) {
        out.push(h("a", { class: "file", href: location.hash, "data-path": f.path, onclick: async (e) => {
          e.preventDefault();
          try { box.replaceChildren(fileBox(await app.src.file(c.id, f.path))); } catch (err) { box.replaceChildren(errorBox(err)); }
        } }, f.path.split("/").pop(), h("span", { class: "size" }, f.size + " B")));
      }
      return out;
    };
    const tree = h("div", { class: "tree v" }, build(root, 0));
    const notes = c.files_total > c.files.length ? h("div", { class: "note" }, "showing " + c.files.length + " of " + c.files_total + " files") : null;
    const scope = c.files_paths ? h("div", { class: "muted" }, "partial snapshot of: " + c.files_paths.join(", ")) : null;
    return [scope, notes, tree, box];
  }
  function fileBox(f) {
    const body = f.omitted ? h("div", { class: "note" }, "content not included in this file (" + f.size + " bytes)")
      : f.binary ? h("pre", null, "binary · " + f.size + " bytes · " + f.hex + (f.truncated ? "…" : ""))
      : h("pre", { class: "content" }, f.text + (f.truncated ? "\n… (shortened)" : ""));
    return h("div", { class: "filebox", id: "file-content" }, h("div", { class: "fh" }, f.path + " · " + f.size + " bytes" + (f.binary ? " · binary" : "")), body,
      commands(f.git));
  }
  function diffView(d) {
    const out = h("div", { class: "detail", id: "diff" });
    const side = x => x ? (x.short + " (step " + x.step + (x.node ? " · " + x.node : "") + ")") : "nothing";
    out.appendChild(h("h2", null, "Diff ", h("span", { class: "mono" }, side(d.a)), " → ", h("span", { class: "mono" }, side(d.b))));
    diffBody(out, d);
    add(out, commands(d.git));
    return out;
  }
  function diffBody(out, d) {
    const src = { src: app.src, id: null };
    out.appendChild(h("h3", null, "State"));
    if (!d.state.length) out.appendChild(h("div", { class: "muted" }, "no state changes"));
    for (const c of d.state) {
      let body;
      if (c.kind === "changed") body = h("div", { class: "sides" },
        h("div", null, h("div", { class: "side-h" }, "before"), renderValue(c.old, src, null, 1)),
        h("div", null, h("div", { class: "side-h" }, "after"), renderValue(c.new, src, null, 1)));
      else if (c.kind === "added") body = renderValue(c.new, src, null, 1);
      else if (c.kind === "removed") body = renderValue(c.old, src, null, 1);
      else {
        const n = Array.isArray(c.items) ? c.items.length : (c.items && c.items.len) || 0;
        body = h("div", null, h("div", { class: "muted" }, (c.kind === "appended" ? n + " item" + (n === 1 ? "" : "s") + " appended at index " : n + " item" + (n === 1 ? "" : "s") + " removed from index ") + c.start),
          renderValue(c.items, src, null, 0));
      }
      out.appendChild(h("div", { class: "change", "data-kind": c.kind }, h("div", { class: "ch" }, h("span", null, pathText(c.path)), h("span", { class: "badge k-" + cssWord(c.kind) }, c.kind)),
        h("div", { class: "cb" }, body)));
    }
    out.appendChild(h("h3", null, "Files"));
    if (!d.files_compared) out.appendChild(h("div", { class: "muted" }, "neither checkpoint has a workspace snapshot"));
    else if (!d.files.length) out.appendChild(h("div", { class: "muted" }, "no file changes"));
    for (const f of d.files) {
      const name = f.old_path && f.old_path !== f.path ? f.old_path + " → " + f.path : f.path;
      let body;
      if (f.binary) body = h("div", { class: "muted" }, "binary file (" + (f.old_size ?? "-") + " → " + (f.new_size ?? "-") + " bytes)");
      else if (f.too_large) body = h("div", { class: "muted" }, "too large to diff here (" + (f.old_size ?? "-") + " → " + (f.new_size ?? "-") + " bytes)");
      else if (f.omitted) body = h("div", { class: "note" }, "contents not included in this file");
      else body = udiff(f.diff || "");
      out.appendChild(h("div", { class: "change file", "data-path": f.path }, h("div", { class: "ch" }, h("span", null, name), h("span", { class: "badge k-" + cssWord(f.status) }, f.status)), h("div", { class: "cb" }, body)));
    }
    return out;
  }
  function udiff(textBody) {
    const box = h("div", { class: "udiff" });
    for (const line of textBody.replace(/\n$/, "").split("\n")) {
      const cls = line.startsWith("+++") || line.startsWith("---") ? "hdr" : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
      box.appendChild(h("div", { class: cls }, line || " "));
    }
    return box;
  }
  async function sessionFilesView(st, path) {
    const out = h("div", { class: "detail", id: "session-files" });
    const list = await app.src.sessionFiles(st.run, st.wt);
    out.appendChild(h("h2", null, "Session files"));
    if (!list.files.length) out.appendChild(h("div", { class: "muted" }, "this run has no session files"));
    else out.appendChild(h("table", { class: "sfiles" }, h("thead", null, h("tr", null, ["path", "version", "author", "reason", "updated", "size"].map(x => h("th", null, x)))),
      h("tbody", null, list.files.map(f => h("tr", null,
        h("td", null, h("a", { href: hashFor({ run: st.run, wt: st.wt, tab: "files", file: f.key }), class: "mono", "data-path": f.key }, f.key)),
        h("td", null, String(f.version)), h("td", null, f.author), h("td", null, f.reason), h("td", null, when(f.created_at)), h("td", null, String(f.size)))))));
    for (const [k, msg] of Object.entries(list.errors || {})) out.appendChild(h("div", { class: "error" }, k + ": " + msg));
    if (path) {
      const f = await app.src.sessionFile(st.run, st.wt, path);
      out.appendChild(h("h3", null, path + " · " + f.total + " version" + (f.total === 1 ? "" : "s")));
      for (const v of f.versions) {
        out.appendChild(h("div", { class: "change", "data-version": v.version }, h("div", { class: "ch" }, h("span", null, "version " + v.version), h("span", { class: "muted" }, v.author + " · " + when(v.created_at))),
          h("div", { class: "cb" }, v.reason ? h("div", null, v.reason) : null,
            v.binary ? h("div", { class: "muted" }, "binary · " + v.size + " bytes") : v.too_large ? h("div", { class: "muted" }, "too large to diff") : udiff(v.diff || ""))));
      }
      add(out, commands(f.git));
    }
    return out;
  }

  // ---------------------------------------------------------------- start
  function start() {
    app.root = document.getElementById("app");
    const embedded = document.getElementById("gitstate-data");
    if (embedded) {
      const bundle = JSON.parse(embedded.textContent);
      app.src = new StaticSource(bundle);
      app.worktree = bundle.worktree;
      if (!location.hash && bundle.graphs.length === 1) history.replaceState(null, "", "#" + hashFor({ run: bundle.graphs[0].id, wt: bundle.graphs[0].worktree !== bundle.worktree ? bundle.graphs[0].worktree : "" }));
    } else {
      app.src = new ServerSource();
      app.worktree = null;
    }
    frame();
    document.getElementById("nav-runs").addEventListener("click", e => { e.preventDefault(); go({}); });
    window.addEventListener("hashchange", () => { route().catch(e => app.view.replaceChildren(errorBox(e))); });
    route().catch(e => app.view.replaceChildren(errorBox(e)));
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
})();

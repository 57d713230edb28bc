// The herd dashboard: reads the HTTP API of the replica that served it and
// follows its event stream, so every panel updates without a reload. Raft
// state is not an event, so the cluster panel is also read every 2 s.
'use strict';

const $ = (sel, el = document) => el.querySelector(sel);
const state = {
  token: localStorage.getItem('herd-token') || '',
  pos: null,            // the stream position to resume from
  tasks: new Map(),     // task id -> {state, kind, message, index}
  nodeEvents: new Map(), // node id -> its latest event from the stream
  detail: null,         // the task shown in detail
  dirty: new Set(),
  timer: null,
  abort: null,
};

function headers() {
  return state.token ? { 'X-Herd-Token': state.token } : {};
}

async function get(path) {
  const r = await fetch(path, { headers: headers(), cache: 'no-store' });
  if (!r.ok) {
    let msg = r.status + ' ' + r.statusText;
    try { const b = await r.json(); if (b.error) msg = b.error; } catch (e) { /* not JSON */ }
    throw new Error(path + ': ' + msg);
  }
  return r.json();
}

function showError(e) {
  const el = $('#error');
  if (!e) { el.hidden = true; el.textContent = ''; return; }
  el.hidden = false;
  el.textContent = String(e.message || e);
}

function td(text, cls) {
  const c = document.createElement('td');
  c.textContent = text == null ? '' : String(text);
  if (cls) c.className = cls;
  return c;
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

function tr(cells, attrs = {}) {
  const r = document.createElement('tr');
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') r.className = v; else r.setAttribute(k, v);
  }
  r.append(...cells);
  return r;
}

function when(t) {
  if (!t || t.startsWith('0001')) return '';
  return new Date(t).toLocaleTimeString();
}

function mb(m) { return m >= 1024 ? (m / 1024).toFixed(1) + ' GiB' : m + ' MiB'; }

// --- panels -------------------------------------------------------------

async function refreshCluster() {
  const [self, conf, stats] = await Promise.all([
    get('/v1/status/self'), get('/v1/operator/raft/configuration'), get('/v1/operator/raft/stats')]);
  $('#served-by').textContent = 'served by ' + self.id + ' (' + (stats.state || self.state || '?') + ')';
  const leader = conf.servers.find(s => s.leader);
  $('#leader').textContent = leader ? leader.id : 'none';
  fill($('#servers tbody'), conf.servers.map(s => tr([
    td(s.id), td(s.leader ? 'leader' : 'follower', s.leader ? 'role-leader' : 'role-follower'),
    td(s.voter ? 'yes' : 'no'), td(s.version || '-', 'version'), td(s.raft_address), td(s.http_address),
  ], { 'data-id': s.id, class: s.leader ? 'leader' : '' })));
  const keys = ['state', 'term', 'commit_index', 'applied_index', 'last_log_index', 'last_snapshot_index', 'last_contact', 'num_peers'];
  fill($('#raft tbody'), keys.filter(k => k in stats).map(k => tr([td(self.id + ' ' + k.replaceAll('_', ' ')), td(stats[k])], { 'data-key': k })));
}

async function refreshNodes() {
  const { nodes } = await get('/v1/nodes');
  fill($('#nodes tbody'), (nodes || []).map(n => {
    const last = state.nodeEvents.get(n.id) || (n.events || [])[n.events ? n.events.length - 1 : 0];
    const health = n.health ? Math.round(n.health.score * 100) + '%' : '';
    return tr([
      td(n.id), td(n.version || '-', 'version'), td(n.liveness, 'liveness state-' + n.liveness), td(n.management, 'management state-' + n.management),
      td(n.tier ? n.tier.tier : ''), td(health),
      td(n.running_attempts + '/' + n.slots + ' slots'),
      td((n.free.cpu_millis || 0) + 'm CPU, ' + mb(n.free.memory_mb || 0)),
      td(last ? when(last.time) + ' ' + last.message : ''),
    ], { 'data-id': n.id });
  }));
}

async function refreshPending() {
  const { tasks } = await get('/v1/tasks?state=PENDING&limit=50');
  const list = tasks || [];
  $('#pending-count').textContent = list.length === 50 ? '(first 50)' : '(' + list.length + ')';
  fill($('#pending tbody'), list.map(t => {
    const tl = t.timeline || [];
    const waiting = [...tl].reverse().find(e => e.kind === 'waiting');
    const why = waiting ? waiting.message : (tl.length ? tl[tl.length - 1].message : '');
    return tr([td(t.id), td(t.name), td(t.spec.priority), td(why, 'why')], { 'data-id': t.id, class: 'clickable' });
  }));
}

function renderTasks() {
  const rows = [...state.tasks.entries()].sort((a, b) => b[1].index - a[1].index).slice(0, 50);
  fill($('#tasks tbody'), rows.map(([id, t]) => tr([
    td(id), td(t.state, 'state state-' + t.state), td(t.kind + ': ' + t.message),
  ], { 'data-id': id, class: 'clickable' })));
}

async function refreshJobs() {
  const { jobs } = await get('/v1/jobs?limit=20');
  const box = $('#jobs');
  box.replaceChildren();
  for (const j of (jobs || []).slice().reverse()) {
    const h = document.createElement('h3');
    h.append(document.createTextNode(j.name + ' '));
    const s = document.createElement('span');
    s.className = 'state-' + j.state;
    s.textContent = j.state;
    h.append(s, document.createTextNode(' ' + j.id));
    const d = dag(j);
    d.setAttribute('data-job', j.id);
    d.setAttribute('data-state', j.state);
    box.append(h, d);
  }
}

// dag lays a job's stages out in columns by depth: a stage sits one
// column right of the deepest stage it depends on.
function dag(job) {
  const depth = {};
  const byName = Object.fromEntries(job.stages.map(s => [s.name, s]));
  const d = name => {
    if (depth[name] != null) return depth[name];
    depth[name] = 0; // a cycle cannot be submitted; this stops one anyway
    const deps = byName[name].depends_on || [];
    depth[name] = deps.length ? 1 + Math.max(...deps.map(d)) : 0;
    return depth[name];
  };
  job.stages.forEach(s => d(s.name));
  const el = document.createElement('div');
  el.className = 'dag';
  const cols = [];
  for (const s of job.stages) {
    const i = depth[s.name];
    if (!cols[i]) { cols[i] = document.createElement('div'); cols[i].className = 'column'; }
    const box = document.createElement('div');
    box.className = 'stage state-' + s.state;
    box.textContent = s.name + ' ' + s.state;
    const small = document.createElement('small');
    const done = (s.tasks || []).filter(t => t.state === 'SUCCEEDED').length;
    small.textContent = done + '/' + (s.task_ids || []).length + ' tasks' + (s.depends_on ? ' ← ' + s.depends_on.join(', ') : '');
    box.append(small);
    cols[i].append(box);
  }
  el.append(...cols.filter(Boolean));
  return el;
}

async function refreshDetail() {
  if (!state.detail) return;
  const t = await get('/v1/tasks/' + encodeURIComponent(state.detail));
  $('#task-detail').hidden = false;
  $('#detail-id').textContent = t.id;
  fill($('#detail-summary tbody'), [
    ['state', t.state], ['name', t.name], ['command', (t.spec.command || []).join(' ')],
    ['priority', t.spec.priority], ['submitted', when(t.submitted_at)],
  ].map(([k, v]) => tr([td(k), td(v, k === 'state' ? 'state state-' + v : '')])));
  fill($('#detail-attempts tbody'), (t.attempts || []).map(a => tr([
    td(a.number), td(a.node_id), td(a.state, 'state state-' + a.state), td(a.exit_code), td(when(a.started_at)), td(when(a.finished_at)),
  ])));
  $('#detail-timeline').replaceChildren(...(t.timeline || []).map(e => {
    const li = document.createElement('li');
    li.textContent = when(e.time) + ' ' + e.kind + ': ' + e.message;
    return li;
  }));
  const last = (t.attempts || [])[t.attempts ? t.attempts.length - 1 : 0];
  $('#detail-output').textContent = last ? (last.output_tail || '') : '';
}

// --- updates ------------------------------------------------------------

const panels = { cluster: refreshCluster, nodes: refreshNodes, pending: refreshPending, tasks: async () => renderTasks(), jobs: refreshJobs, detail: refreshDetail };

function mark(...names) {
  names.forEach(n => state.dirty.add(n));
  if (!state.timer) state.timer = setTimeout(flush, 150);
}

async function flush() {
  state.timer = null;
  const names = [...state.dirty];
  state.dirty.clear();
  try {
    await Promise.all(names.map(n => panels[n]()));
    showError(null);
  } catch (e) {
    showError(e);
  }
}

function addEventLine(text) {
  const list = $('#events');
  const li = document.createElement('li');
  li.textContent = text;
  list.prepend(li);
  while (list.children.length > 200) list.lastChild.remove();
}

function handle(ev) {
  if (ev.lost) {
    addEventLine('-- ' + ev.message);
    return;
  }
  state.pos = { index: ev.index, offset: ev.offset + 1 };
  addEventLine(when(ev.time) + ' ' + ev.topic + ' ' + ev.key + ' ' + ev.kind + (ev.state ? ' [' + ev.state + ']' : '') + ': ' + ev.message);
  if (ev.topic === 'task') {
    state.tasks.set(ev.key, { state: ev.state, kind: ev.kind, message: ev.message, index: ev.index });
    if (state.tasks.size > 500) {
      const oldest = [...state.tasks.entries()].sort((a, b) => a[1].index - b[1].index)[0][0];
      state.tasks.delete(oldest);
    }
    mark('tasks', 'pending');
    if (ev.key === state.detail) mark('detail');
  } else if (ev.topic === 'node') {
    state.nodeEvents.set(ev.key, ev);
    mark('nodes');
  } else if (ev.topic === 'job') {
    mark('jobs');
  }
}

const sleep = ms => new Promise(r => setTimeout(r, ms));

function setStream(text, live) {
  const el = $('#stream-state');
  el.textContent = text;
  el.className = 'pill' + (live ? ' live' : '');
}

// stream follows /v1/events, resuming past the last event seen whenever
// the connection drops.
async function stream() {
  for (;;) {
    const abort = new AbortController();
    state.abort = abort;
    try {
      const q = state.pos ? '?index=' + state.pos.index + '&offset=' + state.pos.offset : '';
      const r = await fetch('/v1/events' + q, { headers: headers(), cache: 'no-store', signal: abort.signal });
      if (!r.ok) {
        let msg = r.status + ' ' + r.statusText;
        try { const b = await r.json(); if (b.error) msg = b.error; } catch (e) { /* not JSON */ }
        throw new Error('events: ' + msg);
      }
      setStream('live', true);
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (line && line !== '{}') handle(JSON.parse(line));
        }
      }
      throw new Error('the event stream ended');
    } catch (e) {
      if (abort.signal.aborted) return;
      setStream('reconnecting', false);
      showError(e);
      await sleep(1000);
    }
  }
}

function start() {
  if (state.abort) state.abort.abort();
  state.pos = null;
  state.tasks.clear();
  state.nodeEvents.clear();
  mark('cluster', 'nodes', 'pending', 'jobs', 'tasks');
  stream();
}

document.addEventListener('DOMContentLoaded', () => {
  $('#token').value = state.token;
  $('#token-form').addEventListener('submit', ev => {
    ev.preventDefault();
    state.token = $('#token').value.trim();
    localStorage.setItem('herd-token', state.token);
    start();
  });
  const open = ev => {
    const row = ev.target.closest('tr[data-id]');
    if (!row) return;
    state.detail = row.getAttribute('data-id');
    mark('detail');
  };
  $('#tasks').addEventListener('click', open);
  $('#pending').addEventListener('click', open);
  $('#detail-close').addEventListener('click', () => { state.detail = null; $('#task-detail').hidden = true; });
  setInterval(() => mark('cluster'), 2000);
  setInterval(() => mark('nodes'), 5000);
  start();
});

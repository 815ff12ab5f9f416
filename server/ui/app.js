// helix-dbos inspector. Plain script, no framework, no build step.
//
// Rules: every node is built with createElement and textContent (model and
// tool text is untrusted and is never parsed as HTML); no inline handlers
// (the Content-Security-Policy forbids them); every request carries the
// bearer token the user gave, kept in sessionStorage only.
'use strict';

(function () {
  const path = location.pathname;
  const at = path.indexOf('/inspector/');
  const root = at >= 0 ? path.slice(0, at) : ''; // the server's mount prefix
  const base = root + '/inspector/';
  const TOKEN_KEY = 'helix.token'; // the key browser tests set (internal/browser NavigateOpts.SessionStorage)
  const FINAL = new Set(['completed', 'failed']);
  const ACTIVE = new Set(['running', 'queued', 'suspended_client_tool', 'suspended_awaiting_children', 'suspended_step_partial']);

  // ---- DOM helpers -------------------------------------------------------

  // el builds an element: attrs sets attributes (class, data-*, ...; text
  // sets textContent), children are nodes or strings (text nodes).
  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'text') n.textContent = String(v);
      else if (k === 'class') n.className = v;
      else n.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      n.append(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return n;
  }

  const $ = (sel) => document.querySelector(sel);
  const main = () => $('#main');

  function clear(n) { while (n.firstChild) n.removeChild(n.firstChild); }

  function sessionHref(id) { return base + 'sessions/' + encodeURIComponent(id); }

  function sessionLink(id, cls) { return el('a', { href: sessionHref(id), class: cls || 'session-link', text: id }); }

  function pad(n) { return String(n).padStart(2, '0'); }

  function fmtTime(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }

  function fmtDur(ms) {
    if (ms === null || ms === undefined || isNaN(ms)) return '';
    if (ms < 0) ms = 0;
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(1) + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
    return Math.floor(s / 3600) + ' h ' + Math.round((s % 3600) / 60) + ' min';
  }

  function statusBadge(status, id) {
    return el('span', { class: 'status status-' + status, id: id, text: status });
  }

  // pretty renders JSON text (or any value) indented, as text.
  function pretty(v) {
    if (v === undefined || v === null) return '';
    if (typeof v === 'string') {
      try { return JSON.stringify(JSON.parse(v), null, 2); } catch (e) { return v; }
    }
    return JSON.stringify(v, null, 2);
  }

  // ---- errors, token, confirmation ----------------------------------------

  function showError(msg) {
    const e = $('#error');
    e.textContent = msg || '';
    e.hidden = !msg;
  }

  class APIError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  function errorText(err) {
    if (err instanceof APIError) {
      if (err.code === 'session_not_found') return 'Session not found';
      if (err.status === 401) return 'Not signed in: give a bearer token';
      return err.message || ('Request failed (' + err.status + ')');
    }
    return 'The server could not be reached: ' + (err && err.message ? err.message : String(err));
  }

  function authHeaders() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { Authorization: 'Bearer ' + token } : {};
  }

  function showTokenForm() {
    const f = $('#token-form');
    f.hidden = false;
    $('#token').focus();
  }

  function setupTokenForm() {
    const f = $('#token-form');
    f.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = $('#token').value.trim();
      if (v) sessionStorage.setItem(TOKEN_KEY, v);
      else sessionStorage.removeItem(TOKEN_KEY);
      $('#token').value = '';
      f.hidden = true;
      showError('');
      start();
    });
  }

  // api calls a route of the server (path from its root) as the user.
  async function api(method, route, body) {
    const headers = authHeaders();
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(root + route, init);
    let data = null;
    try { data = await res.json(); } catch (e) { data = null; }
    if (res.status === 401) showTokenForm();
    if (!res.ok) {
      const e = (data && data.error) || {};
      throw new APIError(res.status, e.code, e.message || res.statusText);
    }
    return data;
  }

  // confirm asks in dialog#confirm; resolves true on Confirm.
  function confirmAction(text) {
    const d = $('#confirm');
    $('#confirm-text').textContent = text;
    return new Promise((resolve) => {
      const yes = $('#confirm-yes'), no = $('#confirm-no');
      const done = (v) => {
        yes.removeEventListener('click', onYes);
        no.removeEventListener('click', onNo);
        d.removeEventListener('cancel', onNo);
        if (d.open) d.close();
        resolve(v);
      };
      const onYes = () => done(true);
      const onNo = () => done(false);
      yes.addEventListener('click', onYes);
      no.addEventListener('click', onNo);
      d.addEventListener('cancel', onNo);
      d.showModal();
    });
  }

  // ---- sessions list -------------------------------------------------------

  const STATUSES = ['active', 'completed', 'failed', 'interrupted', 'paused'];

  function toISO(local) { // datetime-local value (local time) -> RFC 3339 UTC
    if (!local) return '';
    const d = new Date(local);
    return isNaN(d) ? '' : d.toISOString();
  }

  function toLocal(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (isNaN(d)) return '';
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + 'T' + pad(d.getHours()) + ':' + pad(d.getMinutes());
  }

  function listPage() {
    document.title = 'Sessions · helix-dbos inspector';
    const params = new URLSearchParams(location.search);
    const m = main();
    clear(m);
    const status = el('select', { id: 'filter-status' }, el('option', { value: '', text: 'any' }),
      ...STATUSES.map((s) => el('option', { value: s, text: s })));
    status.value = params.get('status') || '';
    const input = (id, type, key, placeholder) => {
      const i = el('input', { id, type, placeholder });
      i.value = type === 'datetime-local' ? toLocal(params.get(key)) : (params.get(key) || '');
      return i;
    };
    const agent = input('filter-agent', 'text', 'agent', 'agent type');
    const principal = input('filter-principal', 'text', 'principal', 'user ID');
    const from = input('filter-from', 'datetime-local', 'from');
    const to = input('filter-to', 'datetime-local', 'to');
    const search = input('search', 'search', 'q', 'session ID or prefix');
    const apply = el('button', { id: 'apply-filters', type: 'button', text: 'Apply' });
    const filters = el('div', { class: 'filters' },
      el('label', {}, 'Status', status), el('label', {}, 'Agent', agent), el('label', {}, 'Principal', principal),
      el('label', {}, 'Created from', from), el('label', {}, 'Created before', to), el('label', {}, 'Session ID', search), apply);
    const tbody = el('tbody');
    const table = el('table', { id: 'sessions' },
      el('thead', {}, el('tr', {}, ...['Session', 'Agent', 'Status', 'Steps', 'Messages', 'Principal', 'Created', 'Updated']
        .map((h) => el('th', { text: h })))), tbody);
    const prev = el('button', { id: 'prev-page', type: 'button', text: '← Newer', disabled: true });
    const next = el('button', { id: 'next-page', type: 'button', text: 'Older →', disabled: true });
    const count = el('span', { class: 'muted' });
    m.append(el('h1', { text: 'Sessions' }), filters, table, el('div', { class: 'pager' }, prev, next, count));

    const go = (extra) => {
      const p = new URLSearchParams();
      const set = (k, v) => { if (v) p.set(k, v); };
      set('status', status.value); set('agent', agent.value.trim()); set('principal', principal.value.trim());
      set('from', toISO(from.value)); set('to', toISO(to.value)); set('q', search.value.trim());
      for (const [k, v] of Object.entries(extra || {})) set(k, v);
      const qs = p.toString();
      history.pushState(null, '', base + (qs ? '?' + qs : ''));
      loadList(tbody, prev, next, count);
    };
    apply.addEventListener('click', () => go());
    for (const i of [agent, principal, search]) i.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') go(); });
    prev.addEventListener('click', () => go({ before: prev.dataset.cursor }));
    next.addEventListener('click', () => go({ after: next.dataset.cursor }));
    loadList(tbody, prev, next, count);
  }

  async function loadList(tbody, prev, next, count) {
    const params = new URLSearchParams(location.search);
    let data;
    try {
      data = await api('GET', '/inspector/api/sessions?' + params.toString());
    } catch (err) {
      showError(errorText(err));
      return;
    }
    showError('');
    clear(tbody);
    for (const s of data.sessions) {
      tbody.append(el('tr', { 'data-session-id': s.sessionId },
        el('td', {}, sessionLink(s.sessionId)),
        el('td', { text: s.agentType }),
        el('td', {}, statusBadge(s.status)),
        el('td', { text: s.stepCount }),
        el('td', { text: s.messageCount }),
        el('td', { text: s.userId || '' }),
        el('td', { text: fmtTime(s.createdAt) }),
        el('td', { text: fmtTime(s.updatedAt) })));
    }
    if (data.sessions.length === 0) tbody.append(el('tr', {}, el('td', { colspan: 8, class: 'muted', text: 'No sessions match.' })));
    prev.disabled = !data.prevCursor;
    prev.dataset.cursor = data.prevCursor || '';
    next.disabled = !data.nextCursor;
    next.dataset.cursor = data.nextCursor || '';
    count.textContent = data.sessions.length + ' shown';
  }

  // ---- session page --------------------------------------------------------

  let current = null; // the session page's latest data
  let refreshTimer = null;

  async function sessionPage(id) {
    document.title = id + ' · helix-dbos inspector';
    const m = main();
    clear(m);
    m.append(el('h1', {}, 'Session ', el('code', { text: id })), el('p', { class: 'muted', text: 'Loading…' }));
    if (await loadSession(id)) live.start(id);
  }

  // loadSession fetches and renders the session; false when it failed. It
  // clears only an error it showed itself: an action's error stays up
  // through the reload that follows the action.
  let loadFailed = false;
  async function loadSession(id) {
    let data;
    try {
      data = await api('GET', '/inspector/api/session?sessionId=' + encodeURIComponent(id));
    } catch (err) {
      loadFailed = true;
      showError(errorText(err));
      if (err instanceof APIError && err.status === 404) {
        const m = main();
        clear(m);
        m.append(el('h1', {}, 'Session ', el('code', { text: id })), el('p', { class: 'muted', text: 'Session not found.' }));
        live.stop();
      }
      return false;
    }
    if (loadFailed) showError('');
    loadFailed = false;
    current = data;
    renderSession(data);
    return true;
  }

  function scheduleRefresh() {
    if (refreshTimer || !current) return;
    refreshTimer = setTimeout(async () => {
      refreshTimer = null;
      await loadSession(current.session.sessionId);
    }, 250);
  }

  function renderSession(data) {
    const s = data.session;
    const m = main();
    // Keep what the user is typing in result inputs across re-renders.
    const drafts = {};
    for (const t of document.querySelectorAll('.pending-call')) {
      const ta = t.querySelector('textarea.result-input');
      if (ta && ta.value) drafts[t.dataset.toolCallId] = ta.value;
    }
    // The action buttons of the same session stay in the page across
    // re-renders (their state is updated): a refresh (a live event, an
    // action's reload) must not replace a button under the user's pointer,
    // which would lose the click.
    let actions = m.querySelector(':scope > .actions');
    if (actions && actions.dataset.sessionId !== s.sessionId) actions = null;
    for (const child of [...m.childNodes]) if (child !== actions) m.removeChild(child);
    const before = (node) => (actions ? m.insertBefore(node, actions) : m.append(node));
    before(el('h1', {}, 'Session ', el('code', { text: s.sessionId }), ' ', statusBadge(s.status, 'session-status')));

    const meta = el('dl', { class: 'meta' });
    const row = (k, v) => { if (v !== undefined && v !== null && v !== '') meta.append(el('dt', { text: k }), el('dd', {}, v)); };
    row('Agent', s.agentType);
    row('Principal', data.userId || '');
    row('Steps', String(s.stepCount));
    row('Messages', String(s.messageCount));
    row('Created', fmtTime(s.createdAt));
    row('Updated', fmtTime(s.updatedAt));
    if (s.error) row('Error', el('span', { class: 'status-failed', text: (s.errorCode ? s.errorCode + ': ' : '') + s.error }));
    if (s.queue) row('Queue', pretty(s.queue));
    if (data.tags && data.tags.length) row('Tags', data.tags.join(', '));
    before(meta);
    if (actions) updateActions(actions, s);
    else m.append(renderActions(s));

    const left = el('div', {}, el('h2', { text: 'Transcript' }), renderTranscript(data));
    left.append(el('h2', { text: 'Output' }), renderOutput(s));
    const right = el('div', {},
      el('h2', { text: 'Waiting for you' }), renderPending(s, drafts),
      el('h2', { text: 'Timeline' }), renderTimeline(data),
      el('h2', { text: 'Sessions tree' }), renderTree(data));
    m.append(el('div', { class: 'layout' }, left, right));
  }

  // actionStates says which actions a session in its status allows.
  function actionStates(s) {
    const active = ACTIVE.has(s.status);
    return {
      'action-interrupt': active,
      'action-resume': s.status === 'interrupted',
      'action-abort': active,
      'action-retry': s.status === 'failed' || s.status === 'interrupted',
    };
  }

  // updateActions sets the buttons of actions (renderActions') to s.
  function updateActions(actions, s) {
    for (const [id, enabled] of Object.entries(actionStates(s))) {
      const b = actions.querySelector('#' + id);
      if (b) b.disabled = !enabled;
    }
  }

  function renderActions(s) {
    const on = actionStates(s);
    const mk = (id, text, danger) => el('button', { id, type: 'button', text, disabled: !on[id], class: danger ? 'danger' : undefined });
    const interrupt = mk('action-interrupt', 'Interrupt');
    const resume = mk('action-resume', 'Resume');
    const abort = mk('action-abort', 'Abort', true);
    const retry = mk('action-retry', 'Retry');
    const id = s.sessionId;
    act(interrupt, 'Interrupt session ' + id + '? It stops before its next step and can be resumed.',
      () => api('POST', '/interrupt', { sessionId: id, reason: 'interrupted from the inspector' }));
    act(resume, 'Resume session ' + id + ' from its last committed step?', () => api('POST', '/resume', { sessionId: id }));
    act(abort, 'Abort session ' + id + '? It fails with code aborted; it can be retried later.',
      () => api('POST', '/abort', { sessionId: id, reason: 'aborted from the inspector' }));
    act(retry, 'Retry session ' + id + ' from its latest checkpoint?', () => api('POST', '/retry', { sessionId: id }));
    return el('div', { class: 'actions', 'data-session-id': id }, interrupt, resume, abort, retry);
  }

  // act wires a button: confirm, call, then reload the session (and read
  // its stream again, which a resume or retry reopens).
  function act(button, question, call, after) {
    button.addEventListener('click', async () => {
      if (!(await confirmAction(question))) return;
      button.disabled = true;
      try {
        const res = await call();
        showError('');
        if (after) { after(res); return; }
      } catch (err) {
        showError(errorText(err));
      }
      if (current && await loadSession(current.session.sessionId)) live.start(current.session.sessionId);
    });
  }

  function renderTranscript(data) {
    const box = el('div', { id: 'transcript' });
    if (data.messagesOffset > 0) box.append(el('p', { class: 'muted', text: data.messagesOffset + ' earlier messages are not shown.' }));
    const results = {};
    const called = new Set();
    for (const msg of data.messages) {
      if (msg.role === 'tool' && msg.toolCallId) results[msg.toolCallId] = msg;
      for (const c of msg.toolCalls || []) called.add(c.id);
    }
    for (const msg of data.messages) {
      if (msg.role === 'tool' && called.has(msg.toolCallId)) continue; // shown with its call
      const node = el('div', { class: 'message', 'data-role': msg.role },
        el('div', { class: 'role', text: msg.role + (msg.toolName ? ' · ' + msg.toolName : '') }));
      if (msg.thinking && msg.thinking.content) {
        node.append(el('details', { class: 'thinking' }, el('summary', { text: 'thinking' }), el('div', { class: 'content', text: msg.thinking.content })));
      }
      if (msg.role === 'tool') {
        node.append(el('div', { class: 'tool-call', 'data-tool-call-id': msg.toolCallId || '' },
          el('pre', { class: 'tool-result', text: pretty(msg.content) })));
      } else if (msg.content) {
        node.append(el('div', { class: 'content', text: msg.content }));
      }
      for (const c of msg.toolCalls || []) {
        const r = results[c.id];
        node.append(el('div', { class: 'tool-call', 'data-tool-call-id': c.id },
          el('div', {}, el('span', { class: 'name', text: c.name }), el('span', { class: 'muted', text: '  ' + c.id })),
          el('div', { class: 'muted', text: 'arguments' }),
          el('pre', { class: 'tool-args', text: pretty(c.arguments) }),
          el('div', { class: 'muted', text: 'result' }),
          el('pre', { class: 'tool-result', text: r ? pretty(r.content) : '(no result yet)' })));
      }
      box.append(node);
    }
    if (data.messages.length === 0) box.append(el('p', { class: 'muted', text: 'No messages yet.' }));
    return box;
  }

  function renderOutput(s) {
    const has = s.output !== undefined && s.output !== null;
    return el('pre', { id: 'output', class: has ? '' : 'muted', text: has ? pretty(s.output) : 'No structured output.' });
  }

  function renderPending(s, drafts) {
    const box = el('div', { id: 'pending' });
    const target = s.rootSessionId || s.sessionId; // calls are answered on the root session
    for (const c of s.pendingToolCalls || []) {
      const node = el('div', { class: 'pending-call', 'data-tool-call-id': c.toolCallId },
        el('div', {}, el('span', { class: 'name', text: c.toolName }), ' ',
          el('span', { class: 'muted', text: (c.kind === 'approval-response' ? 'needs approval' : 'client tool') + ' · ' + c.toolCallId })),
        el('pre', { class: 'tool-args', text: pretty(c.input) }));
      if (c.deadline) node.append(el('div', { class: 'muted', text: 'times out ' + fmtTime(c.deadline) }));
      const buttons = el('div', { class: 'buttons' });
      const submit = async (button, body) => {
        button.disabled = true;
        try {
          await api('POST', '/submit-tool-result', Object.assign({ sessionId: target, toolCallId: c.toolCallId }, body));
          showError('');
        } catch (err) {
          showError(errorText(err));
          button.disabled = false;
        }
        scheduleRefresh();
      };
      if (c.kind === 'approval-response') {
        const approve = el('button', { class: 'approve', type: 'button', text: 'Approve' });
        const deny = el('button', { class: 'deny danger', type: 'button', text: 'Deny' });
        approve.addEventListener('click', () => submit(approve, { kind: 'approval-response', approved: true }));
        deny.addEventListener('click', () => submit(deny, { kind: 'approval-response', approved: false }));
        buttons.append(approve, deny);
      } else {
        const ta = el('textarea', { class: 'result-input', placeholder: 'the result, as JSON' });
        ta.value = drafts[c.toolCallId] || '';
        const send = el('button', { class: 'submit-result', type: 'button', text: 'Submit result' });
        send.addEventListener('click', () => {
          let result;
          try { result = JSON.parse(ta.value); } catch (e) { showError('The result must be JSON, for example {"answer": "yes"}'); return; }
          submit(send, { kind: 'client-tool-result', result });
        });
        node.append(ta);
        buttons.append(send);
      }
      node.append(buttons);
      box.append(node);
    }
    if (!box.firstChild) box.append(el('p', { class: 'muted', text: 'Nothing waits for an answer.' }));
    return box;
  }

  function renderTimeline(data) {
    const s = data.session;
    const box = el('div', { id: 'timeline' });
    if (data.checkpointsTotal > data.checkpoints.length) {
      box.append(el('p', { class: 'muted', text: (data.checkpointsTotal - data.checkpoints.length) + ' earlier checkpoints are not shown.' }));
    }
    const byRun = {};
    for (const c of data.checkpoints) (byRun[c.runId || ''] = byRun[c.runId || ''] || []).push(c);
    const runs = (s.runs || []).slice();
    if (byRun[''] && byRun[''].length) runs.unshift({ runId: '', turn: '', status: '', startedAt: byRun[''][0].createdAt });
    const canRetry = s.status === 'failed' || s.status === 'interrupted';
    for (const r of runs) {
      const end = r.completedAt ? new Date(r.completedAt) : (FINAL.has(r.status) ? null : new Date());
      const dur = end ? end - new Date(r.startedAt) : null;
      const node = el('div', { class: 'run', 'data-run-id': r.runId },
        el('div', { class: 'run-head' }, r.runId ? 'Turn ' + r.turn + ' ' : 'Earlier steps ', r.status ? statusBadge(r.status) : '',
          el('span', { class: 'muted', text: '  ' + fmtTime(r.startedAt) + (dur !== null ? ' · ' + fmtDur(dur) + (r.completedAt ? '' : ' so far') : '') })),
        el('div', { class: 'muted mono', text: r.runId }));
      const steps = el('ol', { class: 'steps' });
      let prevAt = new Date(r.startedAt);
      const cps = byRun[r.runId] || [];
      const longest = Math.max(1, ...cps.map((c, i) => new Date(c.createdAt) - (i ? new Date(cps[i - 1].createdAt) : prevAt)));
      for (const c of cps) {
        const at = new Date(c.createdAt);
        const ms = at - prevAt;
        prevAt = at;
        const branch = el('button', { class: 'branch', type: 'button', text: 'Branch', title: 'Start a new session from this checkpoint',
          disabled: !!s.parentSessionId });
        const retry = el('button', { class: 'retry', type: 'button', text: 'Retry here', disabled: !canRetry || !!s.parentSessionId });
        act(branch, 'Start a new session from checkpoint ' + c.id + ' (step ' + c.stepCount + ')?',
          () => api('POST', '/branch', { sessionId: s.sessionId, checkpointId: c.id }),
          (res) => { location.href = sessionHref(res.sessionId); });
        act(retry, 'Retry session ' + s.sessionId + ' from checkpoint ' + c.id + ' (step ' + c.stepCount + ')? Later messages are dropped.',
          () => api('POST', '/retry', { sessionId: s.sessionId, checkpointId: c.id }));
        const bar = el('span', { class: 'bar' });
        bar.style.width = Math.max(2, Math.round(120 * Math.max(0, ms) / longest)) + 'px';
        steps.append(el('li', { class: 'step checkpoint', 'data-step': c.stepCount, 'data-checkpoint-id': c.id },
          el('span', { text: 'step ' + c.stepCount }), el('span', { class: 'dur', text: fmtDur(ms) }), bar,
          el('span', { class: 'muted when', text: fmtTime(c.createdAt).slice(11), title: c.messageCount + ' messages at this checkpoint' }), branch, retry));
      }
      if (!cps.length) steps.append(el('li', { class: 'muted', text: 'no committed step' }));
      node.append(steps);
      box.append(node);
    }
    if (!runs.length) box.append(el('p', { class: 'muted', text: 'No runs.' }));
    return box;
  }

  function renderTree(data) {
    const s = data.session;
    const box = el('div', { id: 'tree' });
    if (s.rootSessionId && s.rootSessionId !== s.sessionId) box.append(el('div', {}, 'Root: ', sessionLink(s.rootSessionId, 'tree-link')));
    if (s.parentSessionId && s.parentSessionId !== s.rootSessionId) box.append(el('div', {}, 'Parent: ', sessionLink(s.parentSessionId, 'tree-link')));
    const list = (nodes) => {
      const ul = el('ul');
      for (const c of nodes) {
        const li = el('li', { 'data-session-id': c.subSessionId }, sessionLink(c.subSessionId, 'tree-link'), ' ',
          el('span', { class: 'muted', text: c.agentType + ' · ' + (c.mode === 'persistent' ? 'companion' : 'sub-agent') +
            (c.name && c.name !== c.agentType ? ' ' + c.name : '') + ' · ' }), statusBadge(c.status));
        if (c.children && c.children.length) li.append(list(c.children));
        ul.append(li);
      }
      return ul;
    };
    if (data.children.length) box.append(list(data.children));
    if (data.childrenTruncated) box.append(el('p', { class: 'muted', text: 'More sessions were left out.' }));
    if (!box.firstChild) box.append(el('p', { class: 'muted', text: 'No sub-agents or companions.' }));
    return box;
  }

  // ---- live updates over GET /sse -----------------------------------------
  //
  // EventSource cannot send the Authorization header, so the stream is read
  // with fetch and parsed here. Each event asks for a (coalesced) reload of
  // the session; a dropped connection is reopened from the last event id
  // (Last-Event-ID), so nothing is missed and nothing repeats.

  const live = {
    id: null, lastId: null, ctrl: null, gen: 0,
    set(text, on) { const n = $('#live'); n.textContent = text; n.classList.toggle('on', !!on); },
    stop() {
      this.gen++;
      if (this.ctrl) this.ctrl.abort();
      this.ctrl = null;
      this.set('', false);
    },
    start(id) {
      if (this.id === id && this.ctrl) return; // already reading
      if (this.id !== id) this.lastId = null;
      this.stop();
      this.id = id;
      const gen = this.gen;
      const s = current && current.session;
      if (s && FINAL.has(s.status) && this.lastId === null) return; // nothing more will come
      this.loop(gen);
    },
    async loop(gen) {
      let delay = 500;
      while (gen === this.gen) {
        const ctrl = new AbortController();
        this.ctrl = ctrl;
        let ended = false;
        try {
          ended = await this.read(ctrl.signal, gen);
          delay = 500;
        } catch (err) {
          if (gen !== this.gen) return;
          if (err instanceof APIError && err.code === 'invalid_resume_position') {
            this.lastId = null; // a retry cut the stream below our position: read the current run again
            continue;
          }
          if (err instanceof APIError) {
            showError(errorText(err));
            if (err.status === 401 || err.status === 404) { this.set('', false); this.ctrl = null; return; }
          }
        }
        if (gen !== this.gen) return;
        this.set(ended ? 'ended' : 'reconnecting', false);
        if (ended) { this.ctrl = null; scheduleRefresh(); return; }
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 10000);
      }
    },
    // read reads one response; true when the stream has ended.
    async read(signal, gen) {
      const q = new URLSearchParams({ sessionId: this.id });
      const headers = authHeaders();
      if (this.lastId !== null) headers['Last-Event-ID'] = String(this.lastId);
      const res = await fetch(root + '/sse?' + q.toString(), { headers, signal, cache: 'no-store' });
      if (res.status === 204) return true;
      if (!res.ok) {
        let e = {};
        try { e = (await res.json()).error || {}; } catch (x) { e = {}; }
        if (res.status === 401) showTokenForm();
        throw new APIError(res.status, e.code, e.message || res.statusText);
      }
      this.set('live', true);
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      let ended = false;
      for (;;) {
        const { value, done } = await reader.read();
        if (done || gen !== this.gen) break;
        buf += dec.decode(value, { stream: true });
        buf = buf.replace(/\r\n?/g, '\n');
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          if (this.event(block)) ended = true;
        }
      }
      return ended;
    },
    // event handles one event block; true for the stream's end.
    event(block) {
      let id = null;
      const data = [];
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let value = c < 0 ? '' : line.slice(c + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'id') id = value;
        else if (field === 'data') data.push(value);
      }
      if (id !== null && /^\d+$/.test(id)) this.lastId = Number(id);
      if (!data.length) return false;
      let ev;
      try { ev = JSON.parse(data.join('\n')); } catch (e) { return false; }
      scheduleRefresh();
      return ev.type === 'end' || ev.type === 'fail';
    },
  };

  // ---- cluster page ----------------------------------------------------------

  let clusterTimer = null;

  // ownedLinks lists the caller's sessions an executor holds.
  function ownedLinks(ids) {
    if (!ids.length) return [];
    const ul = el('ul', { class: 'owned-sessions' });
    for (const id of ids) ul.append(el('li', {}, sessionLink(id, 'tree-link')));
    return [ul];
  }

  function clusterPage() {
    document.title = 'Cluster · helix-dbos inspector';
    const m = main();
    clear(m);
    const execBody = el('tbody');
    const queueBody = el('tbody');
    // The storage format level the engines write at: the lowest an alive
    // executor reads (docs/operations.md, rolling deploys).
    const formatNote = el('p', { id: 'format-level', class: 'muted' });
    const head = (...hs) => el('thead', {}, el('tr', {}, ...hs.map((h) => el('th', { text: h }))));
    m.append(el('h1', { text: 'Cluster' }),
      el('h2', { text: 'Executors' }),
      formatNote,
      el('table', { id: 'executors' }, head('Executor', 'State', 'Sessions owned', 'Heartbeat', 'Lease expires', 'Host', 'Version', 'Format level', 'Started'), execBody),
      el('h2', { text: 'Queues' }),
      el('table', { id: 'queues' }, head('Queue', 'Depth (waiting)', 'Running', 'Oldest wait'), queueBody),
      el('p', { class: 'muted', text: 'Refreshed every 5 seconds.' }));
    const load = async () => {
      let data;
      try { data = await api('GET', '/inspector/api/cluster'); } catch (err) { showError(errorText(err)); return; }
      showError('');
      formatNote.textContent = data.formatLevel < data.newestFormatLevel
        ? 'Storage format level ' + data.formatLevel + ': an alive executor of an older release reads no newer formats; ' +
          'level ' + data.newestFormatLevel + ' starts once it is gone (finish the rolling deploy).'
        : 'Storage format level ' + data.formatLevel + ' (the newest).';
      clear(execBody);
      for (const e of data.executors) {
        const state = e.alive ? 'alive' : e.takenOverBy ? 'taken over by ' + e.takenOverBy : e.stoppedAt ? 'stopped' : 'dead';
        execBody.append(el('tr', { 'data-executor-id': e.executorId, 'data-alive': e.alive ? 'true' : 'false' },
          el('td', { class: 'mono', text: e.executorId || '""' }),
          el('td', {}, el('span', { class: 'status ' + (e.alive ? 'status-completed' : 'status-failed'), text: state })),
          el('td', { class: 'owned' }, String(e.sessionsOwned), ...ownedLinks(e.sessions || [])),
          el('td', { text: fmtTime(e.heartbeatAt) }),
          el('td', { text: fmtTime(e.leaseExpiresAt) }),
          el('td', { text: (e.hostname || '') + (e.pid ? ' pid ' + e.pid : '') }),
          el('td', { text: e.applicationVersion }),
          el('td', { class: 'format-level', text: String(e.formatLevel) }),
          el('td', { text: fmtTime(e.startedAt) })));
      }
      if (!data.executors.length) execBody.append(el('tr', {}, el('td', { colspan: 9, class: 'muted', text: 'No executors.' })));
      clear(queueBody);
      for (const q of data.queues) {
        queueBody.append(el('tr', { 'data-queue': q.queue },
          el('td', { class: 'mono', text: q.queue }),
          el('td', { class: 'depth', text: q.depth }),
          el('td', { class: 'running', text: q.running }),
          el('td', { class: 'oldest', text: q.depth > 0 ? fmtDur(q.oldestWaitSeconds * 1000) : '–' })));
      }
      if (!data.queues.length) queueBody.append(el('tr', {}, el('td', { colspan: 4, class: 'muted', text: 'No queued or running workflows.' })));
    };
    load();
    if (clusterTimer) clearInterval(clusterTimer);
    clusterTimer = setInterval(load, 5000);
  }

  // ---- routing -----------------------------------------------------------------

  function start() {
    const rest = path.slice(base.length);
    if (rest === '') listPage();
    else if (rest === 'cluster') clusterPage();
    else if (rest.startsWith('sessions/')) {
      let id;
      try { id = decodeURIComponent(rest.slice('sessions/'.length)); } catch (e) { showError('Session not found'); return; }
      sessionPage(id);
    }
    else showError('No such page');
  }

  document.addEventListener('DOMContentLoaded', () => {
    setupTokenForm();
    window.addEventListener('popstate', () => { if (location.pathname === base) listPage(); });
    start();
  });
}());

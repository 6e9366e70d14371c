// fednet console: logs in, follows the manager's event stream and draws the
// view it sends (docs/console.md). Read-only: nothing here changes the
// federation. Every string from the manager goes into the page as text
// (textContent), never as markup.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);

  // Colours of link states and providers; the same as console.css.
  const COLORS = {
    up: '#3fb950', degraded: '#e3a32b', down: '#f85149', unknown: '#6e7681',
    relay: '#b083f0', accent: '#3d8bfd', text: '#d3dae3', muted: '#8593a3', bg: '#0b0f14',
  };
  const PROVIDERS = {
    aws: '#ff9900', azure: '#00a4ef', gcp: '#4285f4', openstack: '#e0569c',
    opennebula: '#2bb3a3', onprem: '#c0c7d0', edge: '#7ee0c3',
  };
  const HEALTH = {
    ok: COLORS.accent, behind: COLORS.degraded, silent: COLORS.degraded,
    pending: COLORS.unknown, error: COLORS.down, removed: '#3a4350',
  };
  const STATE_ORDER = { down: 0, degraded: 1, unknown: 2, up: 3 };

  let cy = null;          // the cytoscape instance
  let view = null;        // the last view
  let received = 0;       // Date.now() when it came
  let shape = '';         // node and edge ids, to tell when to lay out again
  let es = null;          // the EventSource
  let highlight = null;   // predicate of the network hovered, or null

  // el builds an element: el('td', {class: 'x'}, 'text', child...).
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('data-')) e.setAttribute(k, v);
      else e[k] = v;
    }
    for (const c of children) {
      if (c == null) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }

  // ---- formatting ----
  function ms(ns) {
    if (!ns) return '–';
    const v = ns / 1e6;
    return (v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : v.toFixed(0)) + ' ms';
  }
  function pct(x) {
    if (x == null) return '–';
    const v = x * 100;
    return (v === 0 ? '0' : v < 1 ? v.toFixed(2) : v.toFixed(1)) + ' %';
  }
  function bps(x) {
    if (!x) return '–';
    if (x >= 1e9) return (x / 1e9).toFixed(2) + ' Gbit/s';
    if (x >= 1e6) return (x / 1e6).toFixed(x >= 1e8 ? 0 : 1) + ' Mbit/s';
    return (x / 1e3).toFixed(0) + ' kbit/s';
  }
  function bytes(n) {
    if (!n) return '0 B';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return n.toFixed(i ? 1 : 0) + ' ' + u[i];
  }
  function isZeroTime(t) { return !t || t.startsWith('0001-'); }
  // now is the manager's clock, moved on by the time since the view came.
  function now() {
    if (!view || isZeroTime(view.now)) return Date.now();
    return Date.parse(view.now) + (Date.now() - received);
  }
  function ago(t) {
    if (isZeroTime(t)) return 'never';
    const s = Math.max(0, Math.round((now() - Date.parse(t)) / 1000));
    if (s < 60) return s + ' s ago';
    if (s < 3600) return Math.floor(s / 60) + ' min ago';
    if (s < 86400) return Math.floor(s / 3600) + ' h ago';
    return Math.floor(s / 86400) + ' d ago';
  }
  function clock(t) {
    const d = new Date(t);
    const pad = (n) => String(n).padStart(2, '0');
    const hms = pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
    if (now() - d.getTime() > 86400e3) return (d.getMonth() + 1) + '/' + d.getDate() + ' ' + hms.slice(0, 5);
    return hms;
  }

  // ---- login ----
  async function session() {
    const r = await fetch('api/session', { credentials: 'same-origin', cache: 'no-store' });
    if (!r.ok) return false;
    return (await r.json()).authenticated === true;
  }

  function showLogin(message) {
    if (es) { es.close(); es = null; }
    $('app').hidden = true;
    $('login').hidden = false;
    const err = $('login-error');
    err.hidden = !message;
    err.textContent = message || '';
    $('token').focus();
  }

  async function login(ev) {
    ev.preventDefault();
    const input = $('token');
    const token = input.value;
    input.value = '';
    let r;
    try {
      r = await fetch('api/login', {
        method: 'POST', credentials: 'same-origin', cache: 'no-store',
        headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token: token }),
      });
    } catch (e) {
      showLogin('The manager did not answer: ' + e.message);
      return;
    }
    if (!r.ok) {
      let msg = 'Login failed (' + r.status + ').';
      try { msg = (await r.json()).message || msg; } catch (e) { /* keep msg */ }
      showLogin(msg.charAt(0).toUpperCase() + msg.slice(1));
      return;
    }
    start();
  }

  async function logout() {
    await fetch('api/logout', { method: 'POST', credentials: 'same-origin' });
    view = null;
    shape = '';
    if (cy) cy.elements().remove();
    showLogin('Signed out.');
  }

  function start() {
    $('login').hidden = true;
    $('app').hidden = false;
    if (!cy) cy = makeGraph();
    connect();
  }

  function setLive(state, text) {
    const l = $('live');
    l.className = 'live ' + state;
    $('live-text').textContent = text;
  }

  function connect() {
    if (es) es.close();
    setLive('off', 'connecting');
    es = new EventSource('api/events');
    es.addEventListener('view', (e) => {
      received = Date.now();
      view = JSON.parse(e.data);
      setLive('on', 'live');
      render(view);
    });
    es.addEventListener('expired', () => {
      showLogin('Your session ended; sign in again.');
    });
    es.onerror = async () => {
      setLive('off', 'reconnecting');
      if (es && es.readyState === EventSource.CLOSED) {
        es = null;
        let ok = false;
        try { ok = await session(); } catch (e) { ok = true; /* manager away: retry */ }
        if (ok) setTimeout(connect, 2000); else showLogin('Your session ended; sign in again.');
      }
    };
  }

  // The stream sends the view at least every 5 s; a silence of 15 s means
  // the manager or the way to it is gone.
  setInterval(() => {
    if (!view || $('app').hidden) return;
    if (Date.now() - received > 15000) setLive('stale', 'no update for ' + Math.round((Date.now() - received) / 1000) + ' s');
  }, 1000);

  // ---- graph ----
  function makeGraph() {
    const g = cytoscape({
      container: $('graph'),
      wheelSensitivity: 0.3,
      minZoom: 0.2,
      maxZoom: 3,
      boxSelectionEnabled: false,
      autoungrabify: false,
      style: [
        { selector: 'node.site', style: {
          'shape': 'round-rectangle',
          'background-color': 'data(color)', 'background-opacity': 0.07,
          'border-color': 'data(color)', 'border-width': 2, 'border-opacity': 0.85,
          'label': 'data(label)', 'text-wrap': 'wrap',
          'text-valign': 'top', 'text-halign': 'center', 'text-margin-y': -6,
          'color': COLORS.text, 'font-size': 16, 'font-weight': 600, 'line-height': 1.3,
          'padding': '26px', 'corner-radius': 12,
        } },
        { selector: 'node.site.dim', style: { 'opacity': 0.25 } },
        { selector: 'node.site.hl', style: { 'border-width': 4, 'background-opacity': 0.16 } },
        { selector: 'node.gateway', style: {
          'shape': 'ellipse', 'width': 38, 'height': 38,
          'background-color': 'data(color)', 'border-color': '#ffffff', 'border-width': 2.5,
          'label': 'data(label)', 'text-valign': 'bottom', 'text-margin-y': 7, 'text-wrap': 'wrap',
          'color': COLORS.text, 'font-size': 13, 'font-family': 'ui-monospace, DejaVu Sans Mono, monospace',
          'text-background-color': COLORS.bg, 'text-background-opacity': 0.75, 'text-background-padding': 2,
        } },
        { selector: 'node.gateway.standby', style: {
          'background-opacity': 0.18, 'border-style': 'dashed', 'border-color': 'data(color)', 'border-width': 3,
        } },
        { selector: 'edge.link', style: {
          'width': 4, 'curve-style': 'bezier', 'line-color': 'data(color)', 'line-cap': 'round',
          'label': 'data(label)', 'font-size': 13, 'color': COLORS.text,
          'text-background-color': COLORS.bg, 'text-background-opacity': 0.85, 'text-background-padding': 2,
          'text-background-shape': 'round-rectangle', 'font-family': 'ui-monospace, DejaVu Sans Mono, monospace',
          'z-index': 2,
        } },
        { selector: 'edge.link.down', style: { 'width': 6, 'color': COLORS.down, 'font-weight': 700, 'z-index': 3 } },
        { selector: 'edge.link.unknown', style: { 'line-style': 'dashed', 'line-dash-pattern': [4, 5], 'width': 2.5 } },
        { selector: 'edge.relay', style: {
          'width': 2.5, 'curve-style': 'unbundled-bezier', 'control-point-distances': 150, 'control-point-weights': 0.5,
          'line-color': COLORS.relay, 'line-style': 'dashed', 'line-dash-pattern': [8, 6],
          'target-arrow-shape': 'triangle', 'source-arrow-shape': 'triangle',
          'target-arrow-color': COLORS.relay, 'source-arrow-color': COLORS.relay, 'arrow-scale': 0.8,
          'label': 'data(label)', 'font-size': 13, 'color': COLORS.relay,
          'text-background-color': COLORS.bg, 'text-background-opacity': 0.85, 'text-background-padding': 2,
          'z-index': 1,
        } },
        { selector: 'edge.dim', style: { 'opacity': 0.12 } },
        { selector: 'edge.hover', style: { 'width': 8, 'z-index': 9 } },
      ],
    });
    g.on('mouseover', 'edge, node', (e) => { e.target.addClass('hover'); showTip(e.target, e.originalEvent); });
    g.on('mousemove', 'edge, node', (e) => moveTip(e.originalEvent));
    g.on('mouseout', 'edge, node', (e) => { e.target.removeClass('hover'); hideTip(); });
    g.on('pan zoom', hideTip);
    window.addEventListener('resize', () => { g.resize(); g.fit(undefined, 40); });
    return g;
  }

  function linkLabel(l) {
    if (l.state === 'down') return 'DOWN';
    if (l.state === 'unknown') return '';
    let best = 0;
    for (const d of l.directions) {
      const r = d.probe && d.probe.rttP50Ns;
      if (r && (!best || r < best)) best = r;
    }
    return best ? ms(best) : '';
  }

  function elements(v) {
    const els = [];
    for (const s of v.sites) {
      const region = s.region ? ' · ' + s.region : '';
      els.push({ group: 'nodes', data: { id: 'site:' + s.name, kind: 'site', name: s.name, label: s.name + '\n' + s.provider + region,
        color: PROVIDERS[s.provider] || COLORS.muted }, classes: 'site' });
    }
    for (const g of v.gateways) {
      if (g.removed) continue;
      const role = g.role || 'standby';
      els.push({ group: 'nodes', data: { id: 'gateway:' + g.name, kind: 'gateway', name: g.name, parent: 'site:' + g.site,
        label: g.name + (g.role === 'standby' ? '\n(standby)' : ''), color: HEALTH[g.health] || COLORS.unknown },
        classes: 'gateway ' + role + ' ' + g.health });
    }
    const gws = new Set(v.gateways.filter((g) => !g.removed).map((g) => g.name));
    for (const l of v.links) {
      if (!gws.has(l.a) || !gws.has(l.b)) continue;
      els.push({ group: 'edges', data: { id: 'link:' + l.id, kind: 'link', source: 'gateway:' + l.a, target: 'gateway:' + l.b,
        state: l.state, color: COLORS[l.state] || COLORS.unknown, label: linkLabel(l) }, classes: 'link ' + l.state });
    }
    for (const r of v.relays) {
      els.push({ group: 'edges', data: { id: 'relay:' + r.id, kind: 'relay', source: 'site:' + r.from, target: 'site:' + r.to,
        label: 'via ' + r.via.join(' → ') }, classes: 'relay' });
    }
    return els;
  }

  function drawGraph(v) {
    const want = elements(v);
    const ids = new Set(want.map((e) => e.data.id));
    const newShape = want.map((e) => e.data.id + '>' + (e.data.parent || '')).sort().join(',');
    cy.batch(() => {
      cy.elements().forEach((e) => { if (!ids.has(e.id())) e.remove(); });
      for (const w of want) {
        const e = cy.getElementById(w.data.id);
        if (e.empty()) {
          cy.add(w);
        } else {
          e.data(w.data);
          e.classes(w.classes);
        }
      }
    });
    if (newShape !== shape) {
      shape = newShape;
      layout();
    }
    applyHighlight();
  }

  // layout places the gateways (a site's box follows its gateways) the
  // same way every time, so that a wall display does not reshuffle:
  // cytoscape's circle layout puts one gateway per site on a circle, in
  // site name order; a site's other gateways (standbys) line up behind it,
  // away from the centre.
  const GATEWAY_SPACING = 110;
  function layout() {
    const sites = cy.nodes('.site');
    const byRole = (a, b) => (a.hasClass('active') ? 0 : 1) - (b.hasClass('active') ? 0 : 1) || a.id().localeCompare(b.id());
    const firsts = cy.collection();
    sites.forEach((s) => { const kids = s.children().sort(byRole); if (kids.nonempty()) firsts.merge(kids[0]); });
    if (firsts.empty()) return;
    const radius = Math.max(200, firsts.length * 75);
    firsts.layout({ name: 'circle', radius: firsts.length > 1 ? radius : 1, startAngle: -Math.PI / 2 - Math.PI / firsts.length,
      sort: (a, b) => a.data('parent').localeCompare(b.data('parent')), animate: false, fit: false,
      boundingBox: { x1: -radius, y1: -radius, w: 2 * radius, h: 2 * radius } }).run();
    // The standbys go outward, turned off the radius by half the angle
    // between two chords, so that no straight link to another site's
    // gateway passes through them: the links from the other sites reach a
    // point of the circle at angles 180°/n apart.
    const n = firsts.length;
    const turn = n % 2 === 0 ? Math.PI / (2 * n) : 0;
    sites.forEach((s) => {
      const kids = s.children().sort(byRole);
      if (kids.length < 2) return;
      const c = kids[0].position();
      const a = Math.atan2(c.y, c.x) + turn;
      kids.forEach((k, i) => {
        if (i > 0) k.position({ x: c.x + Math.cos(a) * GATEWAY_SPACING * i, y: c.y + Math.sin(a) * GATEWAY_SPACING * i });
      });
    });
    cy.fit(undefined, 50);
  }

  function applyHighlight() {
    cy.batch(() => {
      cy.elements().removeClass('dim hl');
      if (!highlight) return;
      cy.nodes('.site').forEach((n) => n.addClass(highlight(n.data('name')) ? 'hl' : 'dim'));
      cy.edges().forEach((e) => {
        const a = e.source().isParent() ? e.source() : e.source().parent();
        const b = e.target().isParent() ? e.target() : e.target().parent();
        if (!highlight(a.data('name')) || !highlight(b.data('name'))) e.addClass('dim');
      });
    });
  }

  // ---- hover card ----
  const tip = () => $('tooltip');
  function rows(pairs) {
    const t = el('table');
    for (const [k, v] of pairs) {
      if (v == null || v === '') continue;
      t.append(el('tr', null, el('td', null, k), v instanceof Node ? el('td', null, v) : el('td', null, String(v))));
    }
    return t;
  }
  function showTip(target, ev) {
    if (!view) return;
    const kind = target.data('kind');
    const t = tip();
    t.replaceChildren();
    if (kind === 'link') {
      const l = view.links.find((x) => 'link:' + x.id === target.id());
      if (!l) return;
      t.append(el('h3', null, l.a + ' ↔ ' + l.b + '  ', el('span', { class: 'state ' + l.state }, l.state)));
      if (l.directions.length === 0) t.append(el('div', { class: 'muted' }, 'Neither gateway has reported this link yet.'));
      for (const d of l.directions) {
        const p = d.probe || {};
        t.append(el('div', { class: 'dir' }, d.from + ' → ' + d.to + '  ', el('span', { class: 'state ' + (d.up ? 'up' : 'down') }, d.up ? 'up' : 'down')));
        t.append(rows([
          ['RTT p50 / p99', d.probe ? ms(p.rttP50Ns) + ' / ' + ms(p.rttP99Ns) : 'not probed'],
          ['jitter', d.probe ? ms(p.jitterNs) : null],
          ['loss (1 min)', d.probe ? pct(p.loss) + '  (' + p.lost + ' of ' + p.sent + ')' : null],
          ['recent loss', d.probe ? pct(p.recentLoss) : null],
          ['available bw', bps(d.availableBandwidthBps)],
          ['handshake', ago(d.lastHandshake)],
          ['endpoint', d.endpoint],
          ['rx / tx', bytes(d.rxBytes) + ' / ' + bytes(d.txBytes)],
          ['egress cost', d.egress ? '$' + d.egress.costUsd.toFixed(2) + ' at $' + d.egress.usdPerGB + '/GB' : null],
        ]));
      }
    } else if (kind === 'gateway') {
      const g = view.gateways.find((x) => 'gateway:' + x.name === target.id());
      if (!g) return;
      t.append(el('h3', null, g.name + '  ', el('span', { class: 'badge' }, g.role || 'no plan'), ' ', el('span', { class: 'badge' }, g.health)));
      t.append(rows([
        ['site', g.site],
        ['role', g.role ? g.role + ' (from the ' + g.roleSource + ')' : 'not in the current plans'],
        ['enrolled', g.enrolled ? ago(g.enrolledAt) : 'not yet'],
        ['transit address', g.transitAddress],
        ['LAN address', g.lan],
        ['endpoint', g.endpoint || 'behind NAT'],
        ['seen from', g.observedAddress],
        ['plan generation', g.planGeneration + (g.appliedGeneration < g.planGeneration ? '  (applied ' + g.appliedGeneration + ')' : '  (applied)')],
        ['last report', ago(g.lastReport)],
        ['key rotation', g.rotateKey > g.keyRotation ? 'pending (' + g.rotateKey + ')' : null],
      ]));
      if (g.applyError) t.append(el('div', { class: 'err' }, g.applyError));
    } else if (kind === 'site') {
      const s = view.sites.find((x) => 'site:' + x.name === target.id());
      if (!s) return;
      t.append(el('h3', null, s.name));
      t.append(rows([
        ['provider', s.provider + (s.region ? ' · ' + s.region : '')],
        ['prefixes', s.prefixes.join(', ')],
        ['gateways', s.gateways.join(', ')],
        ['networks', s.networks.join(', ') || 'none'],
        ['relays for', (s.relayFor || []).join(', ')],
      ]));
    } else if (kind === 'relay') {
      const r = view.relays.find((x) => 'relay:' + x.id === target.id());
      if (!r) return;
      t.append(el('h3', null, r.from + ' ⇢ ' + r.to));
      t.append(el('div', null, 'No link of their own (disabled or down in the plan): routed traffic crosses ' + r.via.join(', then ') + '.'));
    } else {
      return;
    }
    t.hidden = false;
    moveTip(ev);
  }
  function moveTip(ev) {
    const t = tip();
    if (t.hidden || !ev) return;
    const pad = 16;
    let x = ev.clientX + pad, y = ev.clientY + pad;
    const r = t.getBoundingClientRect();
    if (x + r.width > window.innerWidth - 8) x = ev.clientX - r.width - pad;
    if (y + r.height > window.innerHeight - 8) y = Math.max(8, ev.clientY - r.height - pad);
    t.style.left = x + 'px';
    t.style.top = y + 'px';
  }
  function hideTip() { tip().hidden = true; }

  // ---- panels ----
  function renderHeader(v) {
    $('fed-name').textContent = v.federation || '';
    document.title = (v.summary.linksDown ? '(' + v.summary.linksDown + ' down) ' : '') + (v.federation || 'fednet') + ' · fednet console';
    $('stat-sites').textContent = v.summary.sites;
    $('stat-gateways').textContent = v.summary.enrolled === v.summary.gateways ? v.summary.gateways : v.summary.enrolled + '/' + v.summary.gateways;
    $('stat-up').textContent = v.summary.linksUp;
    $('stat-degraded').textContent = v.summary.linksDegraded;
    $('stat-down').textContent = v.summary.linksDown;
    $('stat-unknown').textContent = v.summary.linksUnknown;
    $('stat-down').parentElement.classList.toggle('hot', v.summary.linksDown > 0);
    $('stat-revision').textContent = v.revision || '–';
    $('stat-generation').textContent = v.generation;
    $('empty').hidden = v.sites.length > 0;
  }

  function worst(dirs, f) {
    let w = null;
    for (const d of dirs) {
      const x = d.probe ? f(d.probe) : null;
      if (x != null && (w == null || x > w)) w = x;
    }
    return w;
  }

  function renderLinks(v) {
    const sorted = v.links.slice().sort((a, b) => (STATE_ORDER[a.state] - STATE_ORDER[b.state]) || a.id.localeCompare(b.id));
    const body = $('links');
    body.replaceChildren(...sorted.map((l) => {
      let abw = 0;
      for (const d of l.directions) if (d.availableBandwidthBps && (!abw || d.availableBandwidthBps < abw)) abw = d.availableBandwidthBps;
      const rtt = worst(l.directions, (p) => p.rttP50Ns || null);
      const tr = el('tr', { class: l.state, 'data-link': l.id },
        el('td', null, l.a + ' ↔ ' + l.b),
        el('td', null, el('span', { class: 'state ' + l.state }, l.state)),
        el('td', { class: 'num' }, l.state === 'down' ? '–' : ms(rtt)),
        el('td', { class: 'num' }, pct(worst(l.directions, (p) => p.loss))),
        el('td', { class: 'num' }, bps(abw)));
      tr.addEventListener('mouseenter', () => cy.getElementById('link:' + l.id).addClass('hover'));
      tr.addEventListener('mouseleave', () => cy.getElementById('link:' + l.id).removeClass('hover'));
      return tr;
    }));
    if (sorted.length === 0) body.append(el('tr', null, el('td', { class: 'muted', colSpan: 5 }, 'no links')));
  }

  function renderNetworks(v) {
    const list = $('networks');
    list.replaceChildren(...v.networks.map((n) => {
      const li = el('li', { 'data-network': n.name },
        el('span', { class: 'net-name' }, n.name),
        el('span', { class: 'badge ' + n.mode }, n.mode + ' · ' + n.id),
        ...n.sites.map((s) => el('span', { class: 'chip' }, s)));
      li.addEventListener('mouseenter', () => { const set = new Set(n.sites); highlight = (s) => set.has(s); applyHighlight(); });
      li.addEventListener('mouseleave', () => { highlight = null; applyHighlight(); });
      return li;
    }));
    if (v.networks.length === 0) list.append(el('li', { class: 'muted' }, 'no networks'));
  }

  function renderRevisions(v) {
    const list = $('revisions');
    list.replaceChildren(...v.revisions.slice(0, 12).map((r) => {
      const b = el('button', { class: 'quiet', type: 'button' }, 'diff');
      b.addEventListener('click', () => showDiff(r.revision));
      return el('li', { 'data-revision': r.revision },
        el('span', { class: 'rev-n' }, '#' + r.revision),
        el('span', { class: 'rev-when', title: r.created }, ago(r.created)),
        el('span', { class: 'rev-what' }, r.sites + ' sites · ' + r.gateways + ' gateways · ' + r.networks + ' networks'),
        b);
    }));
    if (v.revisions.length === 0) list.append(el('li', { class: 'muted' }, 'no spec applied yet'));
  }

  function renderEvents(v) {
    const list = $('events');
    list.replaceChildren(...v.events.slice(0, 100).map((e) =>
      el('li', { class: e.severity, 'data-subject': e.subject, title: e.time },
        el('span', { class: 'ev-time' }, clock(e.time)), el('span', null, e.text))));
    if (v.events.length === 0) list.append(el('li', { class: 'muted' }, 'nothing yet'));
  }

  async function showDiff(n) {
    const d = $('diff');
    $('diff-title').textContent = 'Spec revision ' + n;
    const pre = $('diff-text');
    pre.replaceChildren('loading…');
    d.showModal();
    const r = await fetch('api/revisions/' + n + '/diff', { credentials: 'same-origin', cache: 'no-store' });
    const body = await r.json();
    if (!r.ok) { pre.replaceChildren(body.message || ('error ' + r.status)); return; }
    pre.replaceChildren(...body.diff.split('\n').map((line) => {
      let c = '';
      if (line.startsWith('+++') || line.startsWith('---')) c = 'file';
      else if (line.startsWith('+')) c = 'add';
      else if (line.startsWith('-')) c = 'del';
      else if (line.startsWith('@@')) c = 'hunk';
      return el('span', { class: c }, line + '\n');
    }));
  }

  function render(v) {
    renderHeader(v);
    drawGraph(v);
    renderLinks(v);
    renderNetworks(v);
    renderRevisions(v);
    renderEvents(v);
  }

  // For tests and for the curious: the graph and the last view, read-only.
  window.fednetConsole = {
    graph: () => cy,
    view: () => view,
  };

  document.addEventListener('DOMContentLoaded', async () => {
    $('login-form').addEventListener('submit', login);
    $('logout').addEventListener('click', logout);
    $('diff-close').addEventListener('click', () => $('diff').close());
    let ok = false;
    try { ok = await session(); } catch (e) { /* shown as the login */ }
    if (ok) start(); else showLogin('');
  });
})();

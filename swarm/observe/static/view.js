// The live view: polls /api/state and /api/events twice a second and redraws an SVG (no library: a few
// hundred elements at most). Links are drawn per node pair; the pair's state is the worse of its two
// directions. While an orbit plan drives the links (the state has `orbit`), the nodes are drawn where they
// are on a latitude/longitude map with their ground tracks, and only the links that are up (or cut by a
// fault) are drawn. The page only reads (GET) from the server it came from; what it shows is in the DOM
// (data-* attributes, body's data-mode and data-t-plan), where the browser tests read it.
"use strict";
const SVG = "http://www.w3.org/2000/svg";
let nextEvent = 0;

function el(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function rate(bps) {
  if (bps === undefined) return "–";
  if (bps >= 1e9) return (bps / 1e9).toFixed(2) + " Gbit/s";
  if (bps >= 1e6) return (bps / 1e6).toFixed(1) + " Mbit/s";
  if (bps >= 1e3) return (bps / 1e3).toFixed(1) + " kbit/s";
  return bps.toFixed(0) + " bit/s";
}

const RANK = {up: 0, impaired: 1, down: 2, cut: 3};

let linkRates = {};  // "a>b" -> bit/s into the directed link (userspace engine), from the last state

function pairRate(a, b) {
  const ab = linkRates[a + ">" + b], ba = linkRates[b + ">" + a];
  if (ab === undefined && ba === undefined) return "";
  return `${a}→${b} ${rate(ab)}, ${b}→${a} ${rate(ba)}`;
}

function pairState(byDir, a, b) {
  const ab = byDir[a + ">" + b], ba = byDir[b + ">" + a];
  let state = "up";
  const labels = [];
  for (const [d, name] of [[ab, a + "→" + b], [ba, b + "→" + a]]) {
    if (!d) continue;
    const s = (d.state === "up") ? (d.conditions ? "impaired" : "up") : d.state;
    if (RANK[s] > RANK[state]) state = s;
    labels.push(d.conditions);
  }
  const same = labels.length === 2 && labels[0] === labels[1];
  const conditions = same ? labels[0] : labels.filter(x => x).join(" | ");
  return {state, conditions};
}

let lastKey = "";

let track = null, trackRelease = null, mode = "";

function setMode(m) {
  if (m === mode) return;
  mode = m;
  lastKey = "";
  document.getElementById("graph").setAttribute("viewBox", m === "map" ? "-545 -275 1090 550" : "-520 -420 1040 840");
  document.body.dataset.mode = m;
}

function draw(st) {
  document.getElementById("title").textContent = "swarm " + st.swarm;
  let facts = `${st.nodes.length} nodes · backend ${st.backend}`;
  if (st.orbit) {
    const utc = new Date(Date.parse(st.orbit.epoch) + st.orbit.t_plan * 1000).toISOString().slice(11, 19);
    facts += ` · orbit t=${st.orbit.t_plan.toFixed(0)} s of ${st.orbit.duration.toFixed(0)} s (x${st.orbit.speedup}, ${utc} UTC)`;
  }
  document.getElementById("facts").textContent = facts + (st.down ? " · DOWN" : "");
  document.getElementById("clock").textContent = new Date(st.t * 1000).toLocaleTimeString();
  setMode(st.orbit && track && track.nodes ? "map" : "graph");
  if (mode === "map") {
    document.body.dataset.tPlan = st.orbit.t_plan;
    return drawMap(st);
  }
  // the topology is rebuilt only when a node's state or a link changed; otherwise only the figures move
  // (a browser redrawing 500 lines twice a second costs the swarm it watches CPU on a small host)
  const key = JSON.stringify([st.nodes.map(n => [n.name, n.state]), st.links]);
  if (key === lastKey) return rates(st);
  lastKey = key;
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  const n = st.nodes.length, R = n > 1 ? 330 : 0, pos = {};
  st.nodes.forEach((node, i) => {
    const a = -Math.PI / 2 + 2 * Math.PI * i / n;
    pos[node.name] = [R * Math.cos(a), R * Math.sin(a)];
  });
  const byDir = {};
  for (const l of st.links) byDir[l.src + ">" + l.dst] = l;
  const links = el("g", {id: "links"}), labels = el("g", {id: "labels"});
  const many = n > 12;
  for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) {
    const a = st.nodes[i].name, b = st.nodes[j].name, [x1, y1] = pos[a], [x2, y2] = pos[b];
    const ps = pairState(byDir, a, b);
    const line = el("line", {class: "link", x1, y1, x2, y2, "data-src": a, "data-dst": b, "data-state": ps.state,
                             "data-conditions": ps.conditions});
    line.appendChild(el("title", {}, `${a} – ${b}: ${ps.state}${ps.conditions ? " (" + ps.conditions + ")" : ""}`));
    links.appendChild(line);
    if ((ps.conditions || ps.state === "cut" || ps.state === "down") && (!many || ps.state !== "up")) {
      const t = el("text", {class: "link-label " + (ps.state === "cut" || ps.state === "down" ? "cut" : ""),
                            x: x1 + (x2 - x1) * 0.3, y: y1 + (y2 - y1) * 0.3 - 6, "text-anchor": "middle"},
                   (ps.state === "cut" || ps.state === "down" ? ps.state + " " : "") + ps.conditions);
      labels.appendChild(t);
    }
  }
  svg.appendChild(links);
  const nodes = el("g", {id: "nodeset"});
  for (const node of st.nodes) {
    const [x, y] = pos[node.name];
    const g = el("g", {class: "node", "data-node": node.name, "data-state": node.state,
                       transform: `translate(${x},${y})`});
    g.appendChild(el("circle", {r: many ? 14 : 26}));
    g.appendChild(el("text", {y: many ? -18 : -34}, node.name));
    if (!many) g.appendChild(el("text", {class: "rate", y: 46}, ""));
    g.appendChild(el("title", {}, `${node.name} ${node.isl_ip} (${node.state})`));
    nodes.appendChild(g);
  }
  svg.appendChild(nodes);
  svg.appendChild(labels);
  table(st);
  rates(st);
}

function table(st) {
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren(...st.nodes.map(node => {
    const tr = document.createElement("tr");
    tr.dataset.node = node.name;
    for (let i = 0; i < 5; i++) tr.appendChild(document.createElement("td"));
    tr.children[0].textContent = node.name; tr.children[1].textContent = node.state;
    return tr;
  }));
}

function rates(st) {
  const rows = document.querySelectorAll("#nodes tbody tr"), labels = document.querySelectorAll("g.node text.rate");
  st.nodes.forEach((node, i) => {
    const up = rate(node.tx_bps), down = rate(node.rx_bps);
    const held = node.dtn ? `${node.dtn.bundles} (${node.dtn.forward_pending} to forward)` : "–";
    if (rows[i]) {
      rows[i].children[2].textContent = up; rows[i].children[3].textContent = down; rows[i].children[4].textContent = held;
    }
    if (labels[i] && mode !== "map") labels[i].textContent = `↑${up} ↓${down}`;
  });
}

// ------------------------------------------------------------------------------------------------ the map
const K = 3;  // SVG units per degree: longitude -180..180 -> x -540..540, latitude 90..-90 -> y -270..270
const X = lon => lon * K, Y = lat => -lat * K;

function wrapped(lat1, lon1, lat2, lon2) {
  // a segment the short way round: across the antimeridian it is drawn as two pieces, one at each edge
  if (Math.abs(lon2 - lon1) <= 180) return [[lat1, lon1, lat2, lon2]];
  const lon2s = lon2 + (lon2 < lon1 ? 360 : -360), edge = lon1 > 0 ? 180 : -180;
  const f = (edge - lon1) / (lon2s - lon1), latE = lat1 + f * (lat2 - lat1);
  return [[lat1, lon1, latE, edge], [latE, -edge, lat2, lon2]];
}

function mapBackground(svg) {
  svg.appendChild(el("rect", {class: "sky", x: -540, y: -270, width: 1080, height: 540}));
  const grid = el("g", {class: "graticule"});
  for (let lon = -180; lon <= 180; lon += 30) grid.appendChild(el("line", {x1: X(lon), y1: -270, x2: X(lon), y2: 270}));
  for (let lat = -90; lat <= 90; lat += 30)
    grid.appendChild(el("line", {x1: -540, y1: Y(lat), x2: 540, y2: Y(lat), class: lat === 0 ? "equator" : ""}));
  for (let lon = -150; lon <= 150; lon += 60) grid.appendChild(el("text", {x: X(lon) + 3, y: 264}, `${lon}°`));
  for (let lat = -60; lat <= 60; lat += 30) grid.appendChild(el("text", {x: -536, y: Y(lat) - 3}, `${lat}°`));
  svg.appendChild(grid);
  const tracks = el("g", {class: "tracks"});
  for (const [name, n] of Object.entries(track.nodes)) {
    if (n.lat.length < 2) continue;
    let pts = [];
    const flush = () => { if (pts.length > 1) tracks.appendChild(el("polyline", {points: pts.join(" "), "data-node": name})); };
    for (let i = 0; i < n.lat.length; i++) {
      if (i && Math.abs(n.lon[i] - n.lon[i - 1]) > 180) { flush(); pts = []; }
      pts.push(`${X(n.lon[i]).toFixed(1)},${Y(n.lat[i]).toFixed(1)}`);
    }
    flush();
  }
  svg.appendChild(tracks);
}

function drawMap(st) {
  const svg = document.getElementById("graph");
  svg.replaceChildren();
  mapBackground(svg);
  const byDir = {};
  for (const l of st.links) byDir[l.src + ">" + l.dst] = l;
  const placed = st.nodes.filter(n => n.lat !== undefined);
  const links = el("g", {id: "links"}), labels = el("g", {id: "labels"});
  for (let i = 0; i < placed.length; i++) for (let j = i + 1; j < placed.length; j++) {
    const a = placed[i], b = placed[j], ps = pairState(byDir, a.name, b.name);
    if (ps.state === "down") continue;  // out of sight: the plan has no link
    for (const [la1, lo1, la2, lo2] of wrapped(a.lat, a.lon, b.lat, b.lon)) {
      const line = el("line", {class: "link", x1: X(lo1), y1: Y(la1), x2: X(lo2), y2: Y(la2), "data-src": a.name,
                               "data-dst": b.name, "data-state": ps.state, "data-conditions": ps.conditions});
      line.appendChild(el("title", {}, `${a.name} – ${b.name}: ${ps.state}${ps.conditions ? " (" + ps.conditions + ")" : ""}`
                                       + (pairRate(a.name, b.name) ? " · " + pairRate(a.name, b.name) : "")));
      links.appendChild(line);
    }
    const both = (linkRates[a.name + ">" + b.name] || 0) + (linkRates[b.name + ">" + a.name] || 0);
    if (both > 0 && Math.abs(a.lon - b.lon) <= 180)  // the link's traffic, both directions, at its middle
      labels.appendChild(el("text", {class: "link-rate", x: X((a.lon + b.lon) / 2), y: Y((a.lat + b.lat) / 2) - 4,
                                     "text-anchor": "middle", "data-src": a.name, "data-dst": b.name, "data-bps": both},
                            rate(both)));
  }
  svg.appendChild(links);
  svg.appendChild(labels);
  const nodes = el("g", {id: "nodeset"});
  for (const node of placed) {
    const g = el("g", {class: "node " + (node.kind || ""), "data-node": node.name, "data-state": node.state,
                       "data-lat": node.lat, "data-lon": node.lon, transform: `translate(${X(node.lon)},${Y(node.lat)})`});
    if (node.kind === "ground") g.appendChild(el("path", {d: "M0,-11 L10,7 L-10,7 Z"}));
    else g.appendChild(el("circle", {r: 7}));
    g.appendChild(el("text", {y: -12}, node.name));
    if (node.dtn) g.appendChild(el("text", {class: "bundles", y: 21}, `${node.dtn.bundles} b`));
    g.appendChild(el("title", {}, `${node.name} ${node.isl_ip} (${node.state}) ${node.lat.toFixed(1)}°, ${node.lon.toFixed(1)}°`
                                  + (node.dtn ? ` · ${node.dtn.bundles} bundles held` : "")));
    nodes.appendChild(g);
  }
  svg.appendChild(nodes);
  const key = JSON.stringify(st.nodes.map(n => [n.name, n.state]));
  if (key !== lastKey) { lastKey = key; table(st); }
  rates(st);
}

function describe(ev) {
  const when = new Date(ev.t * 1000).toLocaleTimeString();
  let what;
  if (ev.type === "link") what = `${ev.src} → ${ev.dst}: ${ev.state}${ev.conditions ? " (" + ev.conditions + ")" : ""}`;
  else if (ev.type === "fault") what = `${ev.kind} ${(ev.args || []).join(" ")}`;
  else if (ev.type === "node") what = `${ev.node}: ${ev.action || ""} ${ev.state}`;
  else if (ev.type === "engine") what = `${ev.node}: engine ${ev.what}`;
  else if (ev.type === "mesh") what = `${ev.state}${ev.converge_s !== "" ? " in " + ev.converge_s + " s" : ""} ${ev.problem || ""}`;
  else if (ev.type === "run") what = ev.message || `${ev.what || ""} (${Number(ev.done || 0).toFixed(0)}/${Number(ev.total || 0).toFixed(0)})`;
  else if (ev.type === "log") what = `${ev.message || ""}`;
  else what = `${ev.state || ""}`;
  return `${when} ${ev.type} ${what} — ${ev.cause || ""}`;
}

async function tick() {
  try {
    const [st, evs] = await Promise.all([
      fetch("api/state").then(r => r.json()),
      fetch("api/events?since=" + nextEvent).then(r => r.json())]);
    if (st.orbit && st.orbit.release !== trackRelease) {  // a new orbit run: its ground tracks, once
      track = await fetch("api/track").then(r => r.json());
      trackRelease = st.orbit.release;
    }
    linkRates = Object.fromEntries((st.link_rates || []).map(r => [r.src + ">" + r.dst, r.bps]));
    draw(st);
    const list = document.getElementById("events");
    for (const ev of evs.events) {
      const li = document.createElement("li");
      li.className = "ev-" + ev.type; li.textContent = describe(ev);
      list.insertBefore(li, list.firstChild);
    }
    while (list.children.length > 300) list.removeChild(list.lastChild);
    nextEvent = evs.next;
  } catch (e) {
    document.getElementById("facts").textContent = "view server not answering: " + e;
  }
  setTimeout(tick, 500);
}

tick();

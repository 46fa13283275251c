// The live view: polls /api/state and /api/events twice a second and redraws an SVG (no library: a few
// hundred elements at most). Links are drawn per node pair; the pair's state is the worse of its two
// directions. `?report=URL` posts what the page shows after each change (used by the browser test).
"use strict";
const SVG = "http://www.w3.org/2000/svg";
const params = new URLSearchParams(location.search);
const report = params.get("report");
let nextEvent = 0;
let lastShown = "";

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

function draw(st) {
  document.getElementById("title").textContent = "swarm " + st.swarm;
  document.getElementById("facts").textContent =
    `${st.nodes.length} nodes · backend ${st.backend}` + (st.down ? " · DOWN" : "");
  document.getElementById("clock").textContent = new Date(st.t * 1000).toLocaleTimeString();
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
    if (!many) g.appendChild(el("text", {class: "rate", y: 46}, `↑${rate(node.tx_bps)} ↓${rate(node.rx_bps)}`));
    g.appendChild(el("title", {}, `${node.name} ${node.isl_ip} (${node.state})`));
    nodes.appendChild(g);
  }
  svg.appendChild(nodes);
  svg.appendChild(labels);
  const body = document.querySelector("#nodes tbody");
  body.replaceChildren(...st.nodes.map(node => {
    const tr = document.createElement("tr");
    for (const v of [node.name, node.state, rate(node.tx_bps), rate(node.rx_bps)]) {
      const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
    }
    return tr;
  }));
}

function describe(ev) {
  const when = new Date(ev.t * 1000).toLocaleTimeString();
  let what;
  if (ev.type === "link") what = `${ev.src} → ${ev.dst}: ${ev.state}${ev.conditions ? " (" + ev.conditions + ")" : ""}`;
  else if (ev.type === "fault") what = `${ev.kind} ${(ev.args || []).join(" ")}`;
  else if (ev.type === "node") what = `${ev.node}: ${ev.action || ""} ${ev.state}`;
  else if (ev.type === "engine") what = `${ev.node}: engine ${ev.what}`;
  else what = `${ev.state || ""}`;
  return `${when} ${ev.type} ${what} — ${ev.cause || ""}`;
}

async function tick() {
  try {
    const [st, evs] = await Promise.all([
      fetch("api/state").then(r => r.json()),
      fetch("api/events?since=" + nextEvent).then(r => r.json())]);
    draw(st);
    const list = document.getElementById("events");
    for (const ev of evs.events) {
      const li = document.createElement("li");
      li.className = "ev-" + ev.type; li.textContent = describe(ev);
      list.insertBefore(li, list.firstChild);
    }
    while (list.children.length > 300) list.removeChild(list.lastChild);
    nextEvent = evs.next;
    if (report) send();
  } catch (e) {
    document.getElementById("facts").textContent = "view server not answering: " + e;
  }
  setTimeout(tick, 500);
}

function send() {
  const shown = {
    nodes: [...document.querySelectorAll("g.node")].map(g => g.dataset.node),
    links: [...document.querySelectorAll("line.link")].map(l => [l.dataset.src, l.dataset.dst, l.dataset.state]),
    events: document.querySelectorAll("#events li").length,
  };
  const text = JSON.stringify(shown);
  if (text === lastShown) return;
  lastShown = text;
  fetch(report, {method: "POST", mode: "no-cors", body: text});
}

tick();

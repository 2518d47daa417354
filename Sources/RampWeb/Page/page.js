// rampd's page: speaks rampd's protocol (PROTOCOL.md) over rampd-web's WebSocket (/live).
// Every fader move is a `set` with a duration (an implicit ramp, never a jump); the buttons are
// `resume`, `pause`, `stop`, `fade-in`, `fade-out` and a duck made of two `fade`s; meters show
// the signal levels that `observe` reports (`*.level.peak`, `*.level.momentary`: what is heard),
// beside the gain; the log shows what `subscribe` sends.
"use strict";

const FLOOR_DB = -60; // the fader's bottom above silence; position 0 is silence
const OBSERVE_RATE = 30;
const STATUS_EVERY_MS = 1000;
const LOG_LINES = 200;

const $ = (selector, root = document) => root.querySelector(selector);
let socket = null;
let nextId = 1;
const pending = new Map();
const strips = new Map(); // key path prefix ("master" or "streams.<id>") -> strip state
let statusTimer = null;

// A token given as ?token= is now a cookie (rampd-web set it): keep it out of the address bar.
if (new URLSearchParams(location.search).has("token")) history.replaceState(null, "", location.pathname);

// ---- Units -------------------------------------------------------------------------------------

function gainFromPosition(position) {
  if (position <= 0) return 0;
  return Math.pow(10, ((position / 100) * -FLOOR_DB + FLOOR_DB) / 20);
}
function positionFromGain(gain) {
  if (!(gain > 0)) return 0;
  const db = 20 * Math.log10(gain);
  return Math.max(0, Math.min(100, ((db - FLOOR_DB) / -FLOOR_DB) * 100));
}
function dbText(gain) {
  if (!(gain > 0)) return "−∞ dB";
  const db = 20 * Math.log10(gain);
  return (db >= 0.05 ? "+" : db <= -0.05 ? "−" : "") + Math.abs(db).toFixed(1) + " dB";
}
function number(id, fallback) {
  const value = parseFloat($(id).value);
  return Number.isFinite(value) && value >= 0 ? value : fallback;
}
const rampDuration = () => number("#duration", 2);
const rampCurve = () => $("#curve").value;
const glide = () => number("#glide", 0.3);

// ---- The connection ----------------------------------------------------------------------------

function connect() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  socket = new WebSocket(`${scheme}//${location.host}/live`);
  setConnection("connecting…", "connecting");
  socket.onmessage = (message) => receive(message.data);
  socket.onclose = () => {
    setConnection("disconnected: retrying", "down");
    for (const [, waiter] of pending) waiter.reject(new Error("the connection closed"));
    pending.clear();
    clearInterval(statusTimer);
    for (const key of [...strips.keys()]) if (key !== "master") removeStrip(key);
    setTimeout(connect, 2000);
  };
}

function setConnection(text, state) {
  const element = $("#connection");
  element.textContent = text;
  element.dataset.state = state;
  document.body.dataset.state = state;
}

/// Sends one request; resolves with its result, rejects with its error.
function request(fields) {
  return new Promise((resolve, reject) => {
    if (!socket || socket.readyState !== WebSocket.OPEN) return reject(new Error("not connected"));
    const id = nextId++;
    pending.set(id, { resolve, reject, cmd: fields.cmd });
    socket.send(JSON.stringify({ id, ...fields }));
  });
}

/// A request whose failure goes to the log rather than to the caller.
function act(fields) {
  return request(fields).catch((error) => {
    logLine(`${fields.cmd} refused: ${error.message}`, "error");
    return null;
  });
}

function receive(text) {
  let line;
  try {
    line = JSON.parse(text);
  } catch {
    return logLine(`unreadable line: ${text}`, "error");
  }
  if (line.web) return webLine(line);
  if (line.event) return event(line);
  const waiter = pending.get(line.id);
  if (waiter) {
    pending.delete(line.id);
    if (line.ok) waiter.resolve(line.result);
    else waiter.reject(new Error(`${line.error.code}: ${line.error.message}`));
  } else if (line.ok === false) {
    logLine(`${line.error.code}: ${line.error.message}`, "error");
  }
}

function webLine(line) {
  if (line.web === "connected") {
    setConnection(`rampd ${line.version}`, "live");
    act({ cmd: "subscribe" });
    observe("master");
    act({ cmd: "get", key: "master.gain" }).then((result) => result && showModel("master", result.model));
    refreshStatus();
    statusTimer = setInterval(refreshStatus, STATUS_EVERY_MS);
  } else if (line.web === "disconnected") {
    setConnection(`rampd unreachable: ${line.message}`, "down");
  } else {
    logLine(`rampd-web: ${line.message}`, "error");
  }
}

// ---- Status: streams, schedules, output --------------------------------------------------------

async function refreshStatus() {
  let status;
  try {
    status = await request({ cmd: "status" });
  } catch {
    return;
  }
  const output = status.output;
  $("#output").textContent =
    `${output.device} · ${output.rate} Hz · ${output.channels} ch · ${output.format}` +
    ` · ${output.state} · underruns ${output.underruns}`;
  const present = new Set();
  for (const stream of status.streams) {
    const key = `streams.${stream.stream}`;
    present.add(key);
    if (!strips.has(key)) addStrip(stream.stream);
    const state = stream.stopping ? "stopping" : stream.paused ? "paused" : "playing";
    const strip = strips.get(key);
    strip.element.dataset.state = state;
    $(".info", strip.element).textContent =
      `${state} · ${formatTime(stream.position)}${stream.loop ? " · loop" : ""} · ${stream.path}`;
  }
  for (const key of [...strips.keys()]) if (key !== "master" && !present.has(key)) removeStrip(key);
  $("#no-streams").hidden = status.streams.length > 0;
  showSchedules(status.scheduled || []);
}

function formatTime(seconds) {
  const minutes = Math.floor(seconds / 60);
  return `${minutes}:${(seconds - minutes * 60).toFixed(1).padStart(4, "0")}`;
}

function showSchedules(scheduled) {
  const body = $("#schedules tbody");
  body.replaceChildren(
    ...scheduled.map((entry) => {
      const row = document.createElement("tr");
      // A repeating schedule refused when its time last came: when, and why.
      const failure = entry.lastFailure
        ? `${new Date(entry.lastFailure.at).toLocaleString()}: ${entry.lastFailure.code}: ${entry.lastFailure.message}`
        : "";
      for (const text of [entry.schedule, new Date(entry.due).toLocaleString(), entry.cmd, entry.started ? "ramping" : "due", failure]) {
        const cell = document.createElement("td");
        cell.textContent = String(text);
        row.append(cell);
      }
      if (entry.lastFailure) row.dataset.failed = "true";
      return row;
    }),
  );
  $("#schedules .empty").hidden = scheduled.length > 0;
}

// ---- Strips: a fader, a meter and buttons for the master and each stream ------------------------

function stripState(element, key, stream) {
  return {
    element, key, stream, gain: 1, transport: 1, peak: null, momentary: null, dragging: false, lastSent: 0, timer: null,
    ducked: null,
  };
}

function addStrip(stream) {
  const key = `streams.${stream}`;
  const element = $("#strip-template").content.firstElementChild.cloneNode(true);
  element.dataset.stream = stream;
  element.dataset.key = `${key}.gain`;
  $(".name", element).textContent = stream;
  const fader = $(".fader", element);
  fader.dataset.key = `${key}.gain`;
  fader.setAttribute("aria-label", `${stream} gain`);
  $("#streams").append(element);
  const strip = stripState(element, key, stream);
  strips.set(key, strip);
  wire(strip);
  observe(key);
  act({ cmd: "get", key: `${key}.gain` }).then((result) => result && showModel(key, result.model));
}

function removeStrip(key) {
  const strip = strips.get(key);
  if (!strip) return;
  strip.element.remove();
  strips.delete(key);
}

function observe(key) {
  act({ cmd: "observe", key: `${key}.gain`, rate: OBSERVE_RATE });
  // The transport (play, pause, stop ramps) times the gain is the gain heard.
  if (key !== "master") request({ cmd: "observe", key: `${key}.transport`, rate: OBSERVE_RATE }).catch(() => {});
  for (const reading of ["peak", "momentary"]) {
    request({ cmd: "observe", key: `${key}.level.${reading}`, rate: OBSERVE_RATE }).catch(() => {});
  }
}

function showModel(key, gain) {
  const strip = strips.get(key);
  if (!strip || strip.dragging) return;
  $(".fader", strip.element).value = positionFromGain(gain);
  $(".gain", strip.element).textContent = dbText(gain);
}

// rampd reports silence as -150.
function levelText(value, unit) {
  if (value === null) return `– ${unit}`;
  if (value <= -150) return `−∞ ${unit}`;
  return (value < -0.05 ? "−" : "") + Math.abs(value).toFixed(1) + ` ${unit}`;
}

function showLevel(strip) {
  // The bar is the peak over the fader's scale: FLOOR_DB … 0 dBFS.
  const peak = strip.peak ?? -150;
  const position = Math.max(0, Math.min(100, ((peak - FLOOR_DB) / -FLOOR_DB) * 100));
  $(".bar", strip.element).style.width = `${position}%`;
  $(".level", strip.element).textContent = `${levelText(strip.peak, "dBFS")} · ${levelText(strip.momentary, "LUFS")}`;
  if (strip.peak !== null) strip.element.dataset.peak = strip.peak.toFixed(2);
  if (strip.momentary !== null) strip.element.dataset.momentary = strip.momentary.toFixed(2);
  strip.element.dataset.gain = (strip.gain * strip.transport).toFixed(6);
}

function wire(strip) {
  const fader = $(".fader", strip.element);
  const gainKey = `${strip.key}.gain`;
  // Each move ramps from what is heard to the new value; at most one request per 50 ms, the
  // last position always sent.
  const send = () => {
    strip.timer = null;
    strip.lastSent = performance.now();
    const value = gainFromPosition(parseFloat(fader.value));
    $(".gain", strip.element).textContent = dbText(value);
    act({ cmd: "set", key: gainKey, value, duration: glide(), curve: "linear", space: "amplitude" });
  };
  fader.addEventListener("input", () => {
    strip.dragging = true;
    strip.ducked = null;
    $("[data-action=duck]", strip.element).setAttribute("aria-pressed", "false");
    const wait = 50 - (performance.now() - strip.lastSent);
    if (wait <= 0) send();
    else if (!strip.timer) strip.timer = setTimeout(send, wait);
  });
  fader.addEventListener("change", () => {
    if (strip.timer) {
      clearTimeout(strip.timer);
      send();
    }
    strip.dragging = false;
  });
  for (const button of strip.element.querySelectorAll(".buttons button")) {
    button.addEventListener("click", () => buttonPressed(strip, button.dataset.action, button));
  }
}

async function buttonPressed(strip, action, button) {
  const stream = strip.stream ? { stream: strip.stream } : {};
  const gainKey = `${strip.key}.gain`;
  const ramp = { duration: rampDuration(), curve: rampCurve() };
  switch (action) {
    case "resume":
    case "pause":
    case "stop":
      return act({ cmd: action, ...stream, fade: ramp.duration, curve: ramp.curve });
    case "fade-in":
    case "fade-out": {
      const result = await act({ cmd: action, key: gainKey, ...ramp });
      if (result) showModel(strip.key, result.to);
      return;
    }
    case "duck": {
      // Down by N dB from the model value, and back to it: two fades under one name, so the
      // latest press wins.
      let to;
      if (strip.ducked === null) {
        const current = await act({ cmd: "get", key: gainKey });
        if (!current) return;
        strip.ducked = current.model;
        to = current.model * Math.pow(10, -number("#duck-db", 12) / 20);
      } else {
        to = strip.ducked;
        strip.ducked = null;
      }
      button.setAttribute("aria-pressed", strip.ducked === null ? "false" : "true");
      const result = await act({ cmd: "fade", key: gainKey, to, name: "duck", ...ramp });
      if (result) showModel(strip.key, result.to);
      return;
    }
  }
}

// ---- Events ------------------------------------------------------------------------------------

function event(line) {
  if (line.event === "value") {
    const match = /^(master|streams\.[^.]+)\.(gain|transport|level\.peak|level\.momentary)$/.exec(line.key);
    const strip = match && strips.get(match[1]);
    if (strip) {
      strip[match[2].replace("level.", "")] = line.value;
      showLevel(strip);
    }
    return;
  }
  if (["stream-started", "stream-ended", "schedule-applied", "schedule-failed"].includes(line.event)) refreshStatus();
  // A ramp started by anyone else (rampctl, a schedule) moves the fader to its target; a fader
  // moved here in the last second shows where the hand left it.
  const started = line.event === "animation-started" && /^(master|streams\.[^.]+)\.gain$/.exec(line.key);
  const strip = started && strips.get(started[1]);
  if (strip) {
    act({ cmd: "get", key: line.key }).then((result) => {
      if (result && performance.now() - strip.lastSent > 1000) showModel(strip.key, result.model);
    });
  }
  const { event: kind, ...rest } = line;
  if (kind === "schedule-failed") {
    const tag = rest.tag ? ` [${rest.tag}]` : "";
    logLine(`schedule-failed #${rest.schedule} ${rest.command}${tag}: ${rest.error.code}: ${rest.error.message}`, "error");
    return;
  }
  logLine(`${kind} ${Object.entries(rest).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(" ")}`, kind);
}

function logLine(text, kind) {
  const item = document.createElement("li");
  const time = document.createElement("time");
  time.textContent = new Date().toLocaleTimeString();
  item.append(time, " ", text);
  item.dataset.kind = kind;
  const log = $("#log");
  log.prepend(item);
  while (log.children.length > LOG_LINES) log.lastElementChild.remove();
}

// ---- Start -------------------------------------------------------------------------------------

const master = stripState($("#strip-master"), "master", null);
strips.set("master", master);
wire(master);
$("#play-form").addEventListener("submit", (submitted) => {
  submitted.preventDefault();
  const path = $("#play-path").value.trim();
  if (!path) return;
  const stream = $("#play-stream").value.trim();
  act({
    cmd: "play", path, ...(stream ? { stream } : {}), fadeIn: rampDuration(), curve: rampCurve(),
    loop: $("#play-loop").checked,
  });
});
connect();

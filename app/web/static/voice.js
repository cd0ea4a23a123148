// The page's audio path, both ways, over one WebSocket (/agent/ws/<sid>) held by a
// dedicated Worker, so the page's main thread (Gradio's renders, the plots) never holds
// up a microphone frame on its way to the server.
//
// Microphone: getUserMedia with the browser's echo cancellation, noise suppression and gain
// control; an AudioWorklet cuts 20 ms frames and posts them straight to the Worker (a
// MessageChannel between the two), which sends each with the browser time of its last
// sample, so voice-to-voice starts at the last voiced frame as captured here.
// Player: reply PCM scheduled back to back with Web Audio, routed through a MediaStream
// into an <audio> element (a path the browser's echo canceller covers, unlike Web Audio's
// own output); it reports when a turn's first sample is audible, and on a stop command it
// goes silent at once and reports how much of each piece was heard. Silent at once: a
// gate (an AudioWorklet after the player's gain) that the Worker closes itself when a pause
// or stop arrives, so a main thread busy with Gradio's renders (109-449 ms seen) does not
// hold the silence; the main thread does the bookkeeping when it gets there.
// Runs once the page has loaded and the server issued its session id (app/web/hub.py); a page
// beyond --max-sessions gets a ticket instead, which the channel answers with the spoken
// busy notice (played at the first click: autoplay rules) before it closes.
(sid) => {
  if (window.voiceAgent || !sid) return [];
  const ctx = new (window.AudioContext || window.webkitAudioContext)({ latencyHint: "interactive" });
  const gain = ctx.createGain();
  const va = {
    sid, ctx, gain, playhead: 0, turns: {}, stopped: {}, chunks: 0, played: {},
    interrupts: {}, mic: null, sent: 0, output: "direct", paused: null, log: [],
  };
  window.voiceAgent = va;
  if (ctx.createMediaStreamDestination) {
    const dest = ctx.createMediaStreamDestination();
    gain.connect(dest);
    va.dest = dest;
    const el = document.createElement("audio");
    el.id = "va-out";
    el.autoplay = true;
    el.srcObject = dest.stream;
    document.body.appendChild(el);
    va.el = el;
    va.output = "element";
  } else {
    gain.connect(ctx.destination);
  }
  // Autoplay rules: audio may start only after a user gesture on the page.
  const resume = () => {
    if (ctx.state !== "running") ctx.resume();
    if (va.el && va.el.paused) va.el.play().catch(() => {});
  };
  ["pointerdown", "keydown", "touchstart"].forEach((e) => document.addEventListener(e, resume));

  // context time -> performance.now() time at which that sample reaches the speaker
  function audibleAt(t) {
    const ts = ctx.getOutputTimestamp ? ctx.getOutputTimestamp() : null;
    if (ts && ts.contextTime > 0) return ts.performanceTime + (t - ts.contextTime) * 1000;
    const out = (ctx.outputLatency || 0) + (ctx.baseLatency || 0);
    return performance.now() + (t - ctx.currentTime + out) * 1000;
  }
  function heardUpTo() {
    const ts = ctx.getOutputTimestamp ? ctx.getOutputTimestamp() : null;
    return ts && ts.contextTime > 0 ? ts.contextTime : ctx.currentTime;
  }
  function send(obj) {
    va.log.push(obj);  // what the player did, in order (the page's tests read it)
    if (va.log.length > 500) va.log.shift();
    channel.postMessage({ type: "send", data: JSON.stringify(obj) });  // dropped there unless open
  }

  // ---- player ---------------------------------------------------------------------------
  function onAudio(buf, received) {
    const head = new DataView(buf, 0, 16);
    const turn = head.getUint32(0, true), index = head.getUint32(4, true);
    const rate = head.getUint32(8, true);
    if (va.stopped[turn]) return;
    const pcm = new Int16Array(buf, 16);
    const ab = ctx.createBuffer(1, pcm.length, rate);
    const ch = ab.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) ch[i] = pcm[i] / 32768;
    const src = ctx.createBufferSource();
    src.buffer = ab;
    src.connect(gain);
    const start = Math.max(va.playhead, ctx.currentTime + 0.005);
    src.start(start);
    const t = va.turns[turn] ||
      (va.turns[turn] = { pieces: [], sources: [], ended: false, gap: 0, gaps: 0 });
    if (t.pieces.length && start > va.playhead) {  // the one before had played out: silence
      t.gap += start - va.playhead;
      t.gaps += 1;
    }
    va.playhead = start + ab.duration;
    t.pieces[index] = { start, dur: ab.duration };
    t.sources.push(src);
    va.chunks += 1;
    src.onended = () => {
      t.sources = t.sources.filter((s) => s !== src);
      maybeDone(turn);
    };
    if (!(turn in va.played)) {
      const audible = audibleAt(start);
      va.played[turn] = audible - received;
      send({ type: "audible", turn, t_ms: audible, received_ms: received });
    }
  }
  function shares(t, upTo) {
    const out = [];
    for (let i = 0; i < t.pieces.length; i++) {
      const p = t.pieces[i];
      out.push(p ? Math.max(0, Math.min(1, (upTo - p.start) / p.dur)) : 0);
    }
    return out;
  }
  function maybeDone(turn) {
    const t = va.turns[turn];
    if (t && t.ended && t.sources.length === 0 && !va.stopped[turn] && !t.reported) {
      t.reported = true;
      send({ type: "done", turn, t_ms: performance.now(), heard: shares(t, Infinity),
             gap_ms: t.gap * 1000, gaps: t.gaps });
    }
  }
  // the context time at which the player went quiet: when the gate closed, if it did
  const quietAt = (closed, t) => (closed != null ? Math.min(closed, t) : t);
  function reopen() {  // after the stopped sources' last quantum
    if (va.gate) setTimeout(() => channel.postMessage({ type: "gate_open" }), 30);
  }
  function pause(msg, arrived, closed) {
    // silent within a few ms (a short fade, then the clock stops), queue and position kept
    const handled = performance.now();  // arrived: in the Worker; handled: here
    const now = ctx.currentTime;
    gain.gain.cancelScheduledValues(now);
    gain.gain.setTargetAtTime(0, now, 0.002);
    const silent = audibleAt(quietAt(closed, now) + 0.01);
    va.paused = { turn: msg.turn, silent, cause_ms: msg.cause_ms,
                  upTo: quietAt(closed, heardUpTo()) + 0.01 };
    setTimeout(() => { if (va.paused) ctx.suspend(); }, 15);
    send({ type: "paused", turn: msg.turn, t_ms: silent, cause_ms: msg.cause_ms,
           arrived_ms: arrived, handled_ms: handled });
  }
  function unpause() {
    if (!va.paused) return;
    // for the page's tests only (the server decided it): when the reply was heard again
    va.log.push({ type: "resumed", turn: va.paused.turn, t_ms: performance.now() });
    va.paused = null;
    ctx.resume().then(() => {
      gain.gain.cancelScheduledValues(ctx.currentTime);
      gain.gain.setTargetAtTime(1, ctx.currentTime, 0.002);
      if (va.gate) channel.postMessage({ type: "gate_open" });
    });
  }
  function stop(msg, arrived, closed) {
    // silence first: every queued source stops at the next render quantum
    const handled = performance.now();
    const was = va.paused;
    const upTo = was ? was.upTo : quietAt(closed, heardUpTo());
    for (const key of Object.keys(va.turns)) {
      const t = va.turns[key];
      for (const s of t.sources) { try { s.stop(); } catch (e) { /* not started */ } }
      t.sources = [];
    }
    // already paused: it went silent then, for the cause that paused it
    const silent = was ? was.silent
      : audibleAt(quietAt(closed, ctx.currentTime) + 128 / ctx.sampleRate);
    const cause = was && was.cause_ms != null ? was.cause_ms : msg.cause_ms;
    va.paused = null;
    if (ctx.state !== "running") ctx.resume();
    gain.gain.cancelScheduledValues(ctx.currentTime);
    gain.gain.setValueAtTime(1, ctx.currentTime);
    va.playhead = ctx.currentTime;
    reopen();
    const turn = msg.turn;
    va.stopped[turn] = true;
    const t = va.turns[turn];
    if (cause != null) va.interrupts[turn] = silent - cause;
    send({ type: "stopped", turn, t_ms: silent, cause_ms: cause, arrived_ms: arrived,
           handled_ms: handled, heard: t ? shares(t, upTo) : [],
           gap_ms: t ? t.gap * 1000 : null, gaps: t ? t.gaps : null });
  }

  // ---- the channel ----------------------------------------------------------------------
  // The server says when the session changed; the page then fetches what is new through
  // a hidden button's Gradio event (no polling while nothing happens).
  function render() {
    const el = document.getElementById("va-refresh");
    const btn = el && (el.tagName === "BUTTON" ? el : el.querySelector("button"));
    va.renders = (va.renders || 0) + 1;  // asked of the server; its polls count the fetches
    if (btn) btn.click();
  }
  // The Worker: the socket, and the microphone frames from the worklet's port. Frames get
  // their capture time here, off the main thread: the worklet says how far before the end
  // of its current render quantum the frame's last sample was, and the Worker, woken by
  // the post within a millisecond or so, reads the clock (in the page's time origin).
  const CHANNEL = `
    let ws = null, shift = 0, seq = 0, sent = 0, mic = null;
    let gate = null, held = null, holds = 0, timer = null;
    onmessage = (e) => {
      const m = e.data;
      if (m.type === "open") { shift = performance.timeOrigin - m.origin; open(m.url); }
      else if (m.type === "send") { if (ws && ws.readyState === 1) ws.send(m.data); }
      else if (m.type === "mic") { if (mic) mic.close(); mic = m.port; mic.onmessage = frame; }
      else if (m.type === "mic_off") { if (mic) mic.close(); mic = null; }
      else if (m.type === "gate") { gate = m.port; gate.onmessage = (g) => release(g.data); }
      else if (m.type === "gate_open") { if (gate) gate.postMessage({ open: true }); }
    };
    const now = () => performance.now() + shift;
    function open(url) {
      ws = new WebSocket(url);
      ws.binaryType = "arraybuffer";
      ws.onmessage = (ev) => forward({ type: typeof ev.data === "string" ? "text" : "audio",
                                       data: ev.data, at: now() });
      ws.onclose = (ev) => { ws = null; postMessage({ type: "closed", code: ev.code }); };
    }
    // A pause or stop closes the player's gate first, then goes on to the page with the
    // audio clock's time of the close; what comes after it waits its turn (order kept).
    function silences(m) {
      if (!gate || m.type !== "text") return false;
      try { const t = JSON.parse(m.data).type; return t === "pause" || t === "stop"; }
      catch (err) { return false; }
    }
    function forward(m) {
      if (held) { held.queue.push(m); return; }
      if (silences(m)) {
        held = { id: ++holds, queue: [m] };
        gate.postMessage({ id: held.id });
        const id = held.id;
        timer = setTimeout(() => release({ id, closed: null }), 50);  // no answer: go on
        return;
      }
      if (m.type === "audio") postMessage(m, [m.data]); else postMessage(m);
    }
    function release(r) {
      if (!held || r.id !== held.id) return;
      clearTimeout(timer);
      const queue = held.queue;
      held = null;
      postMessage({ ...queue.shift(), closed: r.closed });
      while (queue.length && !held) forward(queue.shift());
      if (held) held.queue.push(...queue);
    }
    function frame(e) {
      const { pcm, before, rate } = e.data;
      const msg = new ArrayBuffer(16 + pcm.byteLength);
      const head = new DataView(msg, 0, 16);
      head.setFloat64(0, now() - before * 1000, true);
      head.setUint32(8, seq++, true);
      head.setUint32(12, rate, true);
      new Int16Array(msg, 16).set(pcm);
      if (!ws || ws.readyState !== 1) return;
      ws.send(msg);
      sent += 1;
      if (sent <= 10 || sent % 10 === 0) postMessage({ type: "sent", n: sent });
    }`;
  const channel = new Worker(URL.createObjectURL(
    new Blob([CHANNEL], { type: "application/javascript" })));
  channel.onmessage = (e) => {
    const m = e.data;
    if (m.type === "audio") onAudio(m.data, m.at);
    else if (m.type === "text") onText(JSON.parse(m.data), m.at, m.closed);
    else if (m.type === "sent") va.sent = m.n;
    else if (m.type === "closed") onClose(m.code);
  };
  function onText(msg, at, closed) {
    if (msg.type === "stop") stop(msg, at, closed);
    else if (msg.type === "pause") pause(msg, at, closed);
    else if (msg.type === "resume") unpause();
    else if (msg.type === "end") {
      const t = va.turns[msg.turn] || (va.turns[msg.turn] = { pieces: [], sources: [] });
      t.ended = true;
      maybeDone(msg.turn);
    } else if (msg.type === "render") render();
    else if (msg.type === "ready") { va.ready = true; render(); }
    else if (msg.type === "busy") { va.busy = msg.message; label(); }
    else if (msg.type === "error") console.warn("voice agent:", msg.message);
  }
  function onClose(code) {
    va.ready = false;
    if (code === 4404 || code === 4503) {  // the app restarted, or it is busy
      va.gone = code === 4404;
      if (va.mic) micStop();
      label();
      return;
    }
    setTimeout(connect, 1000);
  }
  function connect() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    channel.postMessage({ type: "open", url: `${proto}://${location.host}/agent/ws/${sid}`,
                          origin: performance.timeOrigin });
  }
  connect();

  // ---- the gate: the player silenced without the main thread ----------------------------
  const GATE = `
    class VaGate extends AudioWorkletProcessor {
      constructor() {
        super();
        this.open = true;
        this.level = 1;
        this.closedAt = null;
        this.k = 1 - Math.exp(-1 / (0.002 * sampleRate));  // a 2 ms fade
        // the Worker's port alone closes and opens it: one queue, so always in order
        this.port.onmessage = (e) => { e.data.port.onmessage = (m) => this.on(e.data.port, m.data); };
      }
      on(worker, m) {
        if (m.open) { this.open = true; this.closedAt = null; return; }
        if (this.open) { this.open = false; this.closedAt = currentTime; }
        worker.postMessage({ id: m.id, closed: this.closedAt });  // when it went quiet
      }
      process(inputs, outputs) {
        const inp = inputs[0], out = outputs[0];
        const target = this.open ? 1 : 0;
        let level = this.level;
        for (let i = 0; i < (out[0] ? out[0].length : 0); i++) {
          level += (target - level) * this.k;
          for (let c = 0; c < out.length; c++) out[c][i] = inp[c] ? inp[c][i] * level : 0;
        }
        this.level = level;
        return true;
      }
    }
    registerProcessor("va-gate", VaGate);`;
  (async () => {
    try {
      const url = URL.createObjectURL(new Blob([GATE], { type: "application/javascript" }));
      await ctx.audioWorklet.addModule(url);
      const node = new AudioWorkletNode(ctx, "va-gate");
      gain.disconnect();
      gain.connect(node);
      node.connect(va.dest || ctx.destination);
      const pipe = new MessageChannel();
      node.port.postMessage({ port: pipe.port1 }, [pipe.port1]);
      channel.postMessage({ type: "gate", port: pipe.port2 }, [pipe.port2]);
      va.gate = node;
    } catch (err) {  // the main thread silences the player alone, as before
      console.warn("voice agent: no audio gate", err);
    }
  })();

  // ---- microphone -----------------------------------------------------------------------
  const WORKLET = `
    class VaMic extends AudioWorkletProcessor {
      constructor(o) {
        super();
        this.n = o.processorOptions.frame;
        this.out = null;  // the Worker's end of a MessageChannel, sent once by the page
        this.port.onmessage = (e) => { this.out = e.data.port; };
        this.reset();
      }
      reset() { this.buf = new Int16Array(this.n); this.i = 0; }
      process(inputs) {
        const ch = inputs[0] && inputs[0][0];
        if (!ch) return true;
        for (let k = 0; k < ch.length; k++) {
          const v = Math.max(-1, Math.min(1, ch[k]));
          this.buf[this.i++] = v < 0 ? v * 32768 : v * 32767;
          if (this.i === this.n) {
            // the frame's last sample, seconds before this render quantum's last one
            const before = (ch.length - k - 1) / sampleRate;
            if (this.out) this.out.postMessage({ pcm: this.buf, before, rate: sampleRate },
                                               [this.buf.buffer]);
            this.reset();
          }
        }
        return true;
      }
    }
    registerProcessor("va-mic", VaMic);`;

  async function micStart() {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: {
      echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 } });
    const mctx = new AudioContext({ latencyHint: "interactive" });
    const url = URL.createObjectURL(new Blob([WORKLET], { type: "application/javascript" }));
    await mctx.audioWorklet.addModule(url);
    const node = new AudioWorkletNode(mctx, "va-mic",
                                      { processorOptions: { frame: Math.round(mctx.sampleRate / 50) } });
    mctx.createMediaStreamSource(stream).connect(node);
    node.connect(mctx.destination);  // outputs silence; keeps the node pulled
    const pipe = new MessageChannel();
    channel.postMessage({ type: "mic", port: pipe.port2 }, [pipe.port2]);
    node.port.postMessage({ port: pipe.port1 }, [pipe.port1]);
    va.mic = { stream, mctx, node };
  }
  function micStop() {
    if (!va.mic) return;
    va.mic.stream.getTracks().forEach((t) => t.stop());
    va.mic.mctx.close();
    va.mic = null;
    channel.postMessage({ type: "mic_off" });
    send({ type: "mic_stop" });
  }
  function label() {
    const btn = document.getElementById("va-mic-btn");
    const state = document.getElementById("va-mic-state");
    if (btn) btn.textContent = va.mic ? "■ Stop talking" : "🎙 Start talking";
    if (state) state.textContent = va.busy || (va.gone ? "the app restarted: reload the page" :
      va.mic ? "listening (echo cancellation on)" : "microphone off");
  }
  document.addEventListener("click", async (e) => {
    if (!e.target.closest || !e.target.closest("#va-mic-btn")) return;
    resume();  // a busy page: this plays the spoken notice, which waits for a gesture
    if (va.busy) return;
    try {
      if (va.mic) micStop(); else await micStart();
    } catch (err) {
      const state = document.getElementById("va-mic-state");
      if (state) state.textContent = "microphone unavailable: " + err.message;
    }
    label();
  });
  return [];
}

// Low-latency reply audio: PCM chunks over Server-Sent Events, played with Web Audio.
// Gradio's streaming <audio> goes through HLS and adds seconds; this plays a chunk as soon
// as it arrives and reports, per turn, how long the first chunk waited before it sounded.
// Runs once on page load (Blocks.load js=...), returns the session id for the hidden box.
() => {
  if (window.voiceAgent) return [window.voiceAgent.sid];
  const sid = (crypto.randomUUID ? crypto.randomUUID() : String(Math.random()).slice(2));
  const ctx = new (window.AudioContext || window.webkitAudioContext)();
  const state = { sid, ctx, playhead: 0, sources: [], played: {}, chunks: 0, engine: "" };
  window.voiceAgent = state;
  // Autoplay rules: audio may start only after a user gesture on the page.
  const resume = () => { if (ctx.state !== "running") ctx.resume(); };
  ["pointerdown", "keydown", "touchstart"].forEach((e) => document.addEventListener(e, resume));

  function stopAll() {
    for (const s of state.sources) { try { s.stop(); } catch (e) { /* already ended */ } }
    state.sources = [];
    state.playhead = ctx.currentTime;
  }

  function play(msg) {
    const received = performance.now();
    const bytes = Uint8Array.from(atob(msg.pcm), (c) => c.charCodeAt(0));
    const pcm = new Int16Array(bytes.buffer, 0, bytes.length >> 1);
    const buf = ctx.createBuffer(1, pcm.length, msg.sr);
    const ch = buf.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) ch[i] = pcm[i] / 32768;
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(ctx.destination);
    const start = Math.max(state.playhead, ctx.currentTime + 0.005);
    src.start(start);
    state.playhead = start + buf.duration;
    state.sources.push(src);
    src.onended = () => { state.sources = state.sources.filter((s) => s !== src); };
    state.chunks += 1;
    state.engine = msg.engine;
    if (msg.first && !(msg.turn in state.played)) {
      // time from arrival until the first sample reaches the speaker
      const out = (ctx.outputLatency || 0) + (ctx.baseLatency || 0);
      const delay = (performance.now() - received) + (start - ctx.currentTime + out) * 1000;
      state.played[msg.turn] = delay;
      fetch("/agent/played", {
        method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ sid, turn: msg.turn, delay_ms: delay, running: ctx.state }),
      });
    }
  }

  function connect() {
    const es = new EventSource("/agent/audio/" + sid);
    es.onmessage = (ev) => {
      const msg = JSON.parse(ev.data);
      if (msg.type === "audio") play(msg);
      else if (msg.type === "stop") stopAll();
    };
    es.onerror = () => { es.close(); setTimeout(connect, 1000); };
    state.es = es;
  }
  connect();
  return [sid];
}

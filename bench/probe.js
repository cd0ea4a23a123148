// Voice-to-voice as the browser sees it, measured the same way on any version of the page
// (injected before the page's own scripts by the benchmark; the app does not know it).
// Microphone: a clone of every track the page opens is analysed in 10 ms blocks; a block
// above -45 dBFS is voiced. Speaker: every AudioBufferSourceNode.start() of a non-silent
// buffer is an output, placed on the clock at the time its first sample reaches the
// output (AudioContext.getOutputTimestamp). A turn = the last voiced block before a
// silence of 300 ms or more -> the first output after it.
(() => {
  const probe = { voiced: [], outputs: [], ends: [] };
  window.__v2vProbe = probe;
  let lastVoiced = null;
  let silentSince = null;
  const orig = navigator.mediaDevices.getUserMedia.bind(navigator.mediaDevices);
  navigator.mediaDevices.getUserMedia = async (c) => {
    const stream = await orig(c);
    const ctx = new AudioContext();
    const src = ctx.createMediaStreamSource(stream.clone());
    const node = ctx.createScriptProcessor(512, 1, 1);
    src.connect(node);
    node.connect(ctx.destination);
    node.onaudioprocess = (e) => {
      const x = e.inputBuffer.getChannelData(0);
      // this block's last sample was captured about when its callback runs
      const tEnd = performance.now();
      const step = Math.round(ctx.sampleRate / 100);
      for (let i = 0; i + step <= x.length; i += step) {
        let s = 0;
        for (let k = i; k < i + step; k++) s += x[k] * x[k];
        const db = 10 * Math.log10(s / step + 1e-12);
        const t = tEnd - ((x.length - i - step) / ctx.sampleRate) * 1000;
        if (db > -45) { lastVoiced = t; silentSince = null; }
        else if (lastVoiced !== null) {
          if (silentSince === null) silentSince = t;
          if (t - silentSince >= 300) { probe.ends.push(lastVoiced); lastVoiced = null; }
        }
      }
    };
    probe.micCtx = ctx;
    return stream;
  };
  const start = AudioBufferSourceNode.prototype.start;
  AudioBufferSourceNode.prototype.start = function (when, ...rest) {
    const ctx = this.context;
    const b = this.buffer;
    let loud = false;
    if (b) {
      const d = b.getChannelData(0);
      for (let i = 0; i < d.length; i += 7) if (Math.abs(d[i]) > 0.003) { loud = true; break; }
    }
    const r = start.call(this, when, ...rest);
    if (loud) {
      const w = Math.max(when || 0, ctx.currentTime);
      const ts = ctx.getOutputTimestamp ? ctx.getOutputTimestamp() : null;
      const at = ts && ts.contextTime > 0 ? ts.performanceTime + (w - ts.contextTime) * 1000
        : performance.now() + (w - ctx.currentTime + (ctx.outputLatency || 0)) * 1000;
      probe.outputs.push(at);
    }
    return r;
  };
  probe.turns = () => probe.ends.map((end) => {
    const out = probe.outputs.find((t) => t > end);
    return { end, audible: out === undefined ? null : out, v2v: out === undefined ? null : out - end };
  });
})();

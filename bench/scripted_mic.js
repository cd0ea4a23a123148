// A scripted microphone for the page (injected before its scripts by tests and benchmarks).
// getUserMedia returns the output of a mixing AudioContext: clips the test plays into it
// (window.__mic.play(b64, rate, gain)), and, when asked (window.__mic.echo(gain, delayMs)),
// the page's own reply audio, as a room would carry it from the speakers to the
// microphone. The mix bypasses the browser's echo canceller: the worst case.
(() => {
  const mic = { ctx: null, dest: null, echoes: 0 };
  window.__mic = mic;
  function ensure() {
    if (mic.ctx) return;
    mic.ctx = new AudioContext({ sampleRate: 48000 });
    mic.dest = mic.ctx.createMediaStreamDestination();
    // a constant, very quiet noise floor, as a real microphone has
    const n = mic.ctx.createBuffer(1, 48000, 48000);
    const d = n.getChannelData(0);
    for (let i = 0; i < d.length; i++) d[i] = (Math.random() - 0.5) * 0.0006;
    const src = mic.ctx.createBufferSource();
    src.buffer = n;
    src.loop = true;
    src.connect(mic.dest);
    src.start();
  }
  mic.play = (b64, rate, gain) => {
    ensure();
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const pcm = new Int16Array(bytes.buffer);
    const buf = mic.ctx.createBuffer(1, pcm.length, rate);
    const ch = buf.getChannelData(0);
    for (let i = 0; i < pcm.length; i++) ch[i] = pcm[i] / 32768;
    const src = mic.ctx.createBufferSource();
    src.buffer = buf;
    const g = mic.ctx.createGain();
    g.gain.value = gain == null ? 1 : gain;
    src.connect(g).connect(mic.dest);
    src.start();
    mic.lastEnd = performance.now() + buf.duration * 1000;
    return buf.duration;
  };
  mic.echo = (gain, delayMs) => {
    ensure();
    const va = window.voiceAgent;
    if (!va || !va.el || !va.el.srcObject) throw new Error("no player output to echo");
    const src = mic.ctx.createMediaStreamSource(va.el.srcObject);
    const delay = mic.ctx.createDelay(1.0);
    delay.delayTime.value = delayMs / 1000;
    const g = mic.ctx.createGain();
    g.gain.value = gain;
    src.connect(delay).connect(g).connect(mic.dest);
    mic.echoes += 1;
  };
  navigator.mediaDevices.getUserMedia = async () => {
    ensure();
    if (mic.ctx.state !== "running") await mic.ctx.resume();
    return mic.dest.stream;
  };
})();

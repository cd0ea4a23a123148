"""The stages behind small protocols: VAD, ASR, end of turn, the model's
stream, the reply budget, chunking, TTS. Nothing of sessions or the page."""

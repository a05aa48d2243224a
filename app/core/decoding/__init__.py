"""Token loops over a loaded model: prefill, decode, batched rows, beam search, speculative
decoding, prompt surprisal, the quantization diff's teacher-forced forwards, the thinking model's accuracy check and
the think probes (the answer if it stopped thinking here).
Ids in, records and events out.
"""

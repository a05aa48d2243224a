"""Token loops over a loaded model: prefill, decode, batched rows, beam search, speculative
decoding, prompt surprisal, the quantization diff's teacher-forced forwards and the thinking model's accuracy check.
Ids in, records and events out.
"""

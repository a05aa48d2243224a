"""Token loops over a loaded model: prefill, decode, batched rows, beam search, speculative
decoding, prompt surprisal and the quantization diff's teacher-forced forwards. Ids in, records and events out.
"""

"""The training loops of the trained methods (imported lazily: they use torch): the shared resumable
loop, BERT-flow's Glow and its fit, SimCSE, and DSE's teacher and student."""

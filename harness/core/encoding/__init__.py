"""From text to cached vectors: backbone resolution, the two encoder engines, the one forward pass,
the pooling table, windows of work and the content-addressed vector cache."""

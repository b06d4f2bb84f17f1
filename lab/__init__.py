"""unflush lab: build, boot and measure vanilla and patched Linux 6.12."""

"""One connection per downstream server: supervision, the stdio child transport, the 2026-07-28 envelope."""

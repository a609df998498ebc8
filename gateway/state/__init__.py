"""Who a client is and what it owns: its activation and artifacts, and the journal that keeps them."""

"""Where a step's time goes: step anatomy, per-step statistics, prefill and decode phases, the roofline per family and step."""

"""Collectives, host transfers, communication/computation overlap and stragglers."""

"""What the chip can do: peak FLOP/s, memory and link bandwidths, each with its source."""

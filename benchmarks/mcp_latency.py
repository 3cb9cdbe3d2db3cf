"""Latency of the traceview MCP server over stdio: start + initialize + list_tools, then
analyze / query / diff on the shared traces (benchmarks/RESULTS.md, "MCP server latency").

Run with cold caches: ``TRACEVIEW_CACHE_DIR=$(mktemp -d) python benchmarks/mcp_latency.py``.
"""

import sys
import time
from pathlib import Path

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

TRACES = Path(__file__).resolve().parents[2] / "shared" / "traces"
CALLS = [("analyze", {"path": "tpu_v6e_4chip_psum.xplane.pb"}), ("analyze", {"path": "tpu_v6e_4chip_psum.xplane.pb"}),
         ("analyze", {"path": "vllm_tpu_qwen"}),
         ("query", {"path": "vllm_tpu_qwen", "sql": "SELECT module, count(*) n FROM ops GROUP BY module"}),
         ("diff", {"base": "mi300x_jax_gemm_sweep.xplane.pb", "treatment": "mi300x_jax_conv3d.xplane.pb"})]


async def main():
    params = StdioServerParameters(command=sys.executable, args=["-m", "traceview.cli", "mcp", "--root", str(TRACES)])
    t0 = time.perf_counter()
    async with stdio_client(params) as streams:
        async with ClientSession(*streams) as s:
            await s.initialize()
            await s.list_tools()
            print(f"start+initialize+list_tools {time.perf_counter() - t0:.2f} s")
            for tool, args in CALLS:
                t = time.perf_counter()
                r = await s.call_tool(tool, args)
                print(f"{tool} {args.get('path', args.get('base'))}: {time.perf_counter() - t:.2f} s, "
                      f"{len(r.content[0].text):,} chars, error={r.is_error}")


if __name__ == "__main__":
    anyio.run(main)

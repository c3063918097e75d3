#!/usr/bin/env bash
# Session 28, device call 3: the fused one-token kernel's warp stall breakdown (call 2: 33 us in the
# kernel itself at 2.35 TB/s, 49% of DRAM peak, so latency, not launch). Which wait dominates: global
# loads (long scoreboard), __syncthreads/mbarrier (barrier), the grid barrier's spin (sleeping, membar).
set -uo pipefail
OUT=${OUT:-/tmp/out}; W=$OUT/w; mkdir -p "$W"
B=build-prebuilt/cuda_moe_bench
S=smsp__average_warps_issue_stalled
M=gpu__time_duration.sum,dram__bytes_read.sum,smsp__warps_issue_stalled_long_scoreboard.avg,smsp__warps_issue_stalled_barrier.avg,smsp__warps_issue_stalled_membar.avg,smsp__warps_issue_stalled_sleeping.avg,smsp__warps_issue_stalled_lg_throttle.avg,smsp__warps_issue_stalled_short_scoreboard.avg,smsp__warps_issue_stalled_wait.avg,smsp__warps_issue_stalled_mio_throttle.avg,smsp__warps_issue_stalled_selected.avg,smsp__warps_issue_stalled_no_instruction.avg,smsp__warps_issue_stalled_math_pipe_throttle.avg,smsp__warps_issue_stalled_drain.avg,smsp__warps_issue_stalled_branch_resolving.avg,smsp__warps_issue_stalled_dispatch_stall.avg,smsp__warps_issue_stalled_not_selected.avg,smsp__warps_issue_stalled_misc.avg,smsp__warps_issue_stalled_tex_throttle.avg,smsp__warps_issue_stalled_imc_miss.avg,smsp__cycles_active.avg
timeout 90 ncu --clock-control none --kernel-name regex:'one_token_kernel' --launch-skip 5 --launch-count 1 --metrics $M \
  $B --shapes qwen3-30b-a3b --ms 1 --no-forced --quick --ab none > "$W/ncu_stalls.txt" 2> "$W/ncu_stalls.err"
echo "ncu rc=$?"
sed -n '/one_token_kernel/,$p' "$W/ncu_stalls.txt" | grep -E "stalled|duration|bytes|cycles_active" 
MOERUN_CUDA_STREAM_TUNE=0 MOERUN_CUDA_ONE_TOKEN=0 timeout 90 ncu --clock-control none --kernel-name regex:'grouped_gemm_kernel' --launch-skip 30 --launch-count 2 --metrics $M \
  $B --shapes qwen3-30b-a3b --ms 1 --no-forced --quick --ab none > "$W/ncu_chain_stalls.txt" 2> "$W/ncu_chain_stalls.err"
echo "ncu chain rc=$?"
sed -n '/grouped_gemm_kernel/,$p' "$W/ncu_chain_stalls.txt" | grep -E "grouped_gemm|stalled_(long|barrier|lg|wait|sleep)|duration|bytes|cycles_active" | cut -c1-110
tar czf "$OUT/call3.tgz" -C "$W" . && rm -rf "$W"

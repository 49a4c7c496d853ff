# ncu_step.awk — per-kernel times of one decode step from Nsight Compute's CSV
# (`ncu --metrics gpu__time_duration.sum --csv ...`, as `gpu_gates.sh kernels` runs it).
# The step is the kernels from one `embed_rows` launch to the next. Prints the
# step's kernel count and sum and each kernel name's count and total (us,
# by total); with launches=FILE, every launch in order with its grid to FILE.
#   awk [-v launches=FILE] -f scripts/ncu_step.awk ncu.csv
{
    line = $0
    sub(/^"/, "", line); sub(/"\r?$/, "", line)
    nf = split(line, f, "\",\"")
    if (nf < 15 || f[13] != "gpu__time_duration.sum") next
    value = f[15]; gsub(/,/, "", value)
    name = f[5]
    if (name == "embed_rows") { embeds++; if (embeds == 2) exit }
    if (embeds != 1) next
    n++; names[n] = name; us[n] = value / 1000.0; grids[n] = f[9]
    if (!(name in total)) { order[++kinds] = name }
    total[name] += value / 1000.0; count[name]++; sum += value / 1000.0
}
END {
    printf "kernels %d sum us %.1f\n", n, sum
    # kernel names by total time, largest first (a selection sort: any awk)
    for (r = 1; r <= kinds; r++) {
        best = 0
        for (i = 1; i <= kinds; i++) if (!done[i] && (best == 0 || total[order[i]] > total[order[best]])) best = i
        done[best] = 1
        printf "%-30s %3d %8.1f\n", order[best], count[order[best]], total[order[best]]
    }
    if (launches != "") for (i = 1; i <= n; i++) printf "%-30s %6.1f %s\n", names[i], us[i], grids[i] > launches
}

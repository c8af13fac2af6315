# Plots bus bandwidth against message size from one or more `comm --csv` outputs (log x axis).
#
#   bazel-bin/bench/comm --backend threads --op all_reduce -b 8 -e 64M -f 4 --csv > all_reduce.csv
#   gnuplot -e "files='all_reduce.csv all_gather.csv'; out='busbw.png'" bench/plot_busbw.gp
#
# Variables: files (space-separated CSV paths; default 'comm.csv'), out (PNG path; default
# 'busbw.png'), title (plot title). Each file is one line, titled by its file name. The CSV
# columns are those of comm --csv: size,count,type,redop,time_us,algbw_GBps,busbw_GBps,...
# Rows with size 0 are skipped (log scale). The threads CSV also has memcpy_GBps (column 9),
# drawn dashed when baseline=1 is set.
if (!exists("files")) files = 'comm.csv'
if (!exists("out")) out = 'busbw.png'
if (!exists("title")) title = 'meshflow collectives: bus bandwidth'
if (!exists("baseline")) baseline = 0

set terminal pngcairo size 1000,600 noenhanced
set output out
set datafile separator ','
set title title
set logscale x 2
set format x '%.0b%B'
set xlabel 'size (bytes)'
set ylabel 'busbw (GB/s)'
set grid
set key top left

if (baseline) {
  plot for [f in files] f using ($1 > 0 ? $1 : 1/0):7 every ::1 with linespoints title f, \
       for [f in files] f using ($1 > 0 ? $1 : 1/0):9 every ::1 with lines dashtype 2 title f.' memcpy'
} else {
  plot for [f in files] f using ($1 > 0 ? $1 : 1/0):7 every ::1 with linespoints title f
}

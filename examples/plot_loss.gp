# Loss curve of a train_lm CSV log (step,loss,lr,tokens_per_s,elapsed_s,world_size,plan) as a PNG:
#   gnuplot -e "csv='/tmp/ck/train_log.csv'; out='loss.png'" examples/plot_loss.gp
# gnuplot (Debian: gnuplot-nox) is not a build dependency.
if (!exists("csv")) csv = 'train_log.csv'
if (!exists("out")) out = 'loss.png'
set terminal pngcairo size 720,420 font ",10" noenhanced
set output out
set datafile separator ","
set key top right
set xlabel "step"
set ylabel "cross-entropy (nats per byte)"
set grid
set title "train_lm: GPT on Python stdlib bytes"
plot csv using 1:2 skip 1 with lines lw 2 title "loss", \
     log(256) with lines dt 2 lc rgb "gray" title "ln 256 (uniform bytes)"

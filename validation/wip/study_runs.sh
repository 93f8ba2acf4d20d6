#!/bin/bash
cd /work/study
A=/work/main/build/cpu/bin/avtrain
D=/work/main/inputs/quickstart.ini
for seed in 1 2 3; do
  for v in fp32:0 fp32:1 fp32:2 bf16:0 fp16:0; do
    p=${v%:*}; u=${v#*:}
    name=s${seed}_${p}_u${u}
    [ -f $name/trace.csv ] && continue
    $A $D --data shards --steps 200 --seed $seed --precision $p --train.init_ulps $u --out $name > $name.log 2>&1
  done
done
echo ALLDONE

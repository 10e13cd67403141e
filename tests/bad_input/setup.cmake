# cmake -DSRC=<tests/bad_input> -DWORK=<dir> -DTRAINER=<mlip-trainer> -P setup.cmake
# The bad-input cases' working folder: files/ plus a 1-epoch model and its checkpoints (run/), a
# model with one byte changed (altered.pt), a file that is no model (garbage.pt) and a checkpoint
# with a cut file (damaged/), and the model compressed (compressed.pt).
file(REMOVE_RECURSE ${WORK})
file(COPY ${SRC}/files/ DESTINATION ${WORK})
execute_process(COMMAND ${TRAINER} train ok.yaml --threads 1 --set output.dir=run WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS ${WORK}/run/model.pt)
  message(FATAL_ERROR "training the bad-input cases' model failed (${rc}): ${out} ${err}")
endif()
execute_process(COMMAND ${TRAINER} compress run/model.pt -o compressed.pt WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "compressing the bad-input cases' model failed (${rc}): ${out} ${err}")
endif()
file(WRITE ${WORK}/garbage.pt "this is not a model\n")
file(COPY ${WORK}/run/checkpoints/epoch-000001/ DESTINATION ${WORK}/damaged)
file(READ ${WORK}/damaged/optimizer.pt head LIMIT 64 HEX)
file(REMOVE ${WORK}/damaged/optimizer.pt)
file(WRITE ${WORK}/damaged/optimizer.pt "${head}")   # 128 bytes of text: size and CRC differ
# One byte of a weight record flipped: the middle of the largest tensor record stored uncompressed
# (code and debug records are compressed, and the middle of their uncompressed size can lie past
# their stored bytes: such a flip hit no weight, and the model loaded).
execute_process(COMMAND python3 -c "
import sys, zipfile
path, out = sys.argv[1], sys.argv[2]
data = bytearray(open(path, 'rb').read())
tensors = [i for i in zipfile.ZipFile(path).infolist()
           if ('/constants/' in i.filename or '/data/' in i.filename) and i.compress_type == zipfile.ZIP_STORED]
info = max(tensors, key=lambda i: i.file_size)
start = info.header_offset + 30 + int.from_bytes(data[info.header_offset + 26:info.header_offset + 28], 'little') \
        + int.from_bytes(data[info.header_offset + 28:info.header_offset + 30], 'little')
data[start + info.file_size // 2] ^= 0x40
open(out, 'wb').write(data)
" ${WORK}/run/model.pt ${WORK}/altered.pt RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not write altered.pt")
endif()
# Packed data sets (mlip-trainer pack): a good one (pack/) and damaged copies: a shard cut short,
# a byte flipped, a shard's index missing, an index pointing inside a record, an index whose
# atom count of a frame is not its record's, no manifest (an interrupted pack).
execute_process(COMMAND ${TRAINER} pack ok.xyz -o pack WORKING_DIRECTORY ${WORK} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "packing ok.xyz failed (${rc}): ${out} ${err}")
endif()
foreach(copy pack_truncated pack_flipped pack_missing pack_index pack_index_atoms pack_nomanifest)
  file(COPY ${WORK}/pack/ DESTINATION ${WORK}/${copy})
endforeach()
execute_process(COMMAND python3 -c "
import os, sys
w = sys.argv[1]
shard = lambda p, ext='.bin': os.path.join(w, p, 'shard-00000' + ext)
os.truncate(shard('pack_truncated'), os.path.getsize(shard('pack_truncated')) - 9)
data = bytearray(open(shard('pack_flipped'), 'rb').read())
data[200] ^= 0x20                      # the first frame's atomic numbers
open(shard('pack_flipped'), 'wb').write(data)
os.remove(shard('pack_missing', '.idx'))
index = bytearray(open(shard('pack_index', '.idx'), 'rb').read())
index[8] ^= 0x08                       # the second frame's offset, 8 bytes off: frame 0 seems short
open(shard('pack_index', '.idx'), 'wb').write(index)
index = bytearray(open(shard('pack_index_atoms', '.idx'), 'rb').read())
n = (len(index) - 8) // 12             # n + 1 offsets, then n atom counts
index[8 * (n + 1)] ^= 0x01             # the first frame's atom count: 9 becomes 8
open(shard('pack_index_atoms', '.idx'), 'wb').write(index)
os.remove(os.path.join(w, 'pack_nomanifest', 'manifest.json'))
" ${WORK} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "could not damage the packs")
endif()

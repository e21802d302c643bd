/* Occupancy probe: each work-group holds SMEM bytes of local memory and spins DUR ns. */
__kernel void k(__global float *out, ulong dur) {
  __local float buf[SMEM / 4];
  int lid = get_local_id(0);
  for (int i = lid; i < SMEM / 4; i += get_local_size(0)) buf[i] = (float)i;
  barrier(CLK_LOCAL_MEM_FENCE);
  ulong t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < dur);
  if (lid == 0) out[get_group_id(0)] = buf[(get_group_id(0) * 7) % (SMEM / 4)];
}

/* Calibration of a context's device for the cost model (dispatch/tune_file.h has the fields). */
#ifndef HD_AUTOTUNE_CALIBRATE_H
#define HD_AUTOTUNE_CALIBRATE_H

#include <stdbool.h>

#include "dispatch/tune_file.h"
#include "autotune/measure.h"

/*
 * Measures, on ctx:
 *   launch_us    an empty kernel, enqueue to finish on the host (what one isolated op pays);
 *   copy_gbps    a device-to-device copy, read plus written bytes, timed by events;
 *   host_gbps    an upload from host memory, timed on the host to completion;
 *   gemm_gflops  the best rate of the device GEMM backends on one large square GEMM
 *                (4096³ on a GPU, 2048³ with quick; 512³ on a CPU device, 128³ with quick),
 *                device events; fused_gflops and clblast_gflops each backend's own, 0 where
 *                it is absent;
 *   cpu_gflops   the CPU backend on a 512³ GEMM (256³ with quick);
 *   cpu_gbps     host memcpy bandwidth, read plus written bytes.
 * Device constants stay 0 without an OpenCL device. Returns HD_OK, or the error of a failed
 * measurement (the context's message says which).
 */
hd_status hd__calibrate(hd_context *ctx, bool quick, hd_tune_calibration *out);

/*
 * Times an n³ GEMM (α = 1, β = 0, fixed data) on backend b, or on the dispatcher's choice for
 * HD_BACKEND_AUTO, in the given mode within budget_s; the calibration's GEMM rates and the
 * benchmark's compute roof both come from it. *out is zeroed when b is absent or ran the GEMM
 * elsewhere (the rate is then unknown, not an error). Returns HD_OK, or the failing status.
 */
hd_status hd__calibrate_gemm(hd_context *ctx, hd_backend b, size_t n, hd_measure_mode mode,
                             double budget_s, hd_measure_result *out);

/*
 * Seconds one call of (op, shape) is expected to take on backend or plan b, before anything
 * runs, for the tools to skip what cannot finish within their time budget: b's own estimate
 * (hd__backend_estimate_us: the scheduler's cost model, from cal; fields left 0 take the
 * backend's default rates) times HD_ESTIMATE_MARGIN, since a call once started cannot be
 * stopped. A backend without an estimate is taken at 1 GB/s and 10 GFLOP/s.
 */
#define HD_ESTIMATE_MARGIN 2.0
double hd__calibrate_estimate_s(const hd_context *ctx, const hd_tune_calibration *cal,
                                hd_backend b, hd_op op, const hd_shape *shape);

#endif

/* llm_rope.c — RoPE inverse frequencies for the Llama-like families as transformers'
 * modeling_rope_utils computes them: default, linear (frequencies divided by the factor), dynamic NTK
 * (the base grows with the sequence beyond max_position_embeddings), Llama 3.1's band-wise scaling and
 * Phi-3's LongRoPE (per-frequency short or long factors, by the sequence's length),
 * over the rotated dims only (Phi-3's partial rotary). Computed in double; transformers
 * uses float32, which differs by far less than the forward's tolerance. */
#include "llm/llm_internal.h"

#include <math.h>

void kiln_llm_rope_inv_freq(const kiln_llm_config *c, int seq_len, double *inv_freq) {
    const int dim = kiln_llm_rope_dim(c), half = dim / 2;
    double base = c->rope_theta;
    if (c->rope_scaling == KILN_ROPE_DYNAMIC && dim > 2) {
        double len = seq_len > c->max_pos ? seq_len : c->max_pos, f = c->rope_factor;
        base *= pow(f * len / c->max_pos - (f - 1), (double)dim / (dim - 2));
    }
    for (int i = 0; i < half; i++) inv_freq[i] = 1.0 / pow(base, (double)(2 * i) / dim);
    if (c->rope_scaling == KILN_ROPE_LONGROPE) {
        const float *ext = seq_len > c->rope_original_max_pos ? c->rope_long : c->rope_short;
        for (int i = 0; i < half; i++) inv_freq[i] /= ext[i];
    } else if (c->rope_scaling == KILN_ROPE_LINEAR) {
        for (int i = 0; i < half; i++) inv_freq[i] /= c->rope_factor;
    } else if (c->rope_scaling == KILN_ROPE_LLAMA3) {
        const double factor = c->rope_factor, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
        const double old_len = c->rope_original_max_pos;
        const double lo_wavelen = old_len / lo, hi_wavelen = old_len / hi;
        for (int i = 0; i < half; i++) {
            double wavelen = 2 * M_PI / inv_freq[i];
            if (wavelen > lo_wavelen) { /* low frequencies: interpolated by the full factor */
                inv_freq[i] /= factor;
            } else if (!(wavelen < hi_wavelen)) { /* the band between: a smooth blend */
                double smooth = (old_len / wavelen - lo) / (hi - lo);
                inv_freq[i] = (1 - smooth) * inv_freq[i] / factor + smooth * inv_freq[i];
            }
        }
    }
}

/* fuzz_hf_config.c — libFuzzer target for the reader of a Hugging Face config.json (llm/llm_config.c,
 * kiln_llm_config_parse: GPT-2 and Llama keys, RoPE scaling, special token ids). The input is parsed
 * as JSON, and a document that loads is read as a model config. A config that loads must be one an
 * engine can record: it is encoded into the llm config section and, when the section decodes (its
 * range checks are stricter: model sizes up to 2^24), decoded to the same config. Seeds:
 * fuzz/corpus/fuzz_hf_config/ (models/kjv-gpt2's config, GPT-2 and Llama 2/3 style configs). */
#include "fuzz_util.h"
#include "llm/llm_engine_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_silence_log();
    kiln_jdoc doc;
    if (kiln_jdoc_parse((const char *)data, size, "config.json", &doc) != KILN_OK) return 0;
    kiln_llm_config cfg, back;
    kiln_status s = kiln_llm_config_parse(&doc, "config.json", &cfg);
    kiln_jdoc_free(&doc);
    if (s != KILN_OK) return 0;
    kiln_strbuf sec = {0};
    int32_t gen_eos[KILN_LLM_MAX_EOS];
    int n_gen_eos = 0;
    if (kiln_llm_config_encode(&cfg, cfg.eos_ids, cfg.n_eos, &sec) != KILN_OK) abort();
    if (kiln_llm_config_decode((const uint8_t *)sec.data, sec.len, &back, gen_eos, &n_gen_eos) == KILN_OK &&
        (memcmp(&back, &cfg, sizeof cfg) || n_gen_eos != cfg.n_eos))
        abort();
    kiln_strbuf_free(&sec);
    return 0;
}

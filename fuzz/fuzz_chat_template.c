/* fuzz_chat_template.c — libFuzzer target for the chat-template engine (kiln_chat_template_create and
 * _apply: src/llm/jinja*.c). Each input is a template's text; what parses is rendered for a short
 * conversation, with and without the generation prompt. Parse errors, runtime errors and the limits
 * (depth, iterations, steps, output and memory) must come back as statuses: a crash, a leak or a
 * hang is a finding. Seeds: fuzz/corpus/fuzz_chat_template/ (real templates from
 * tests/data/chat_templates/). */
#include "kiln/kiln_llm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *source = malloc(size + 1);
    if (!source) return 0;
    memcpy(source, data, size);
    source[size] = 0; /* the text up to the first NUL is the template */
    kiln_chat_template *t = NULL;
    if (kiln_chat_template_create(source, "<s>", "</s>", &t) == KILN_OK) {
        static const kiln_chat_message messages[] = {
            {"system", "You are terse."}, {"user", "Hi {{ there }} ü"}, {"assistant", "<think>x</think>Hello"},
            {"user", "Bye\n"}};
        for (int agp = 0; agp < 2; agp++) {
            char *text = NULL;
            size_t len;
            if (kiln_chat_template_apply(t, messages, 4, agp, &text, &len) == KILN_OK && text[len] != 0) abort();
            free(text);
        }
        kiln_chat_template_free(t);
    }
    free(source);
    return 0;
}

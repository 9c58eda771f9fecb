/* chat_template_internal.h — kiln_chat_template_apply with the clock given (strftime_now's "now"), so
 * that tests render templates that print today's date reproducibly. */
#ifndef KILN_LLM_CHAT_TEMPLATE_INTERNAL_H
#define KILN_LLM_CHAT_TEMPLATE_INTERNAL_H

#include "kiln/kiln_llm.h"

#include <time.h>

/* kiln_chat_template_apply, with strftime_now formatting *now (local time in the public call). */
kiln_status kiln_chat_template_apply_at(const kiln_chat_template *t, const kiln_chat_message *messages, int n,
                                        bool add_generation_prompt, const struct tm *now, char **text, size_t *len);

#endif

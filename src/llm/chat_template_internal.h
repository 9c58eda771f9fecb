/* chat_template_internal.h — kiln_chat_template_apply with the clock given (strftime_now's "now"), so
 * that tests render templates that print today's date reproducibly, and with the conversation and
 * tools as JSON (OpenAI's message objects: tool_calls, tool_call_id, name, ... reach the template). */
#ifndef KILN_LLM_CHAT_TEMPLATE_INTERNAL_H
#define KILN_LLM_CHAT_TEMPLATE_INTERNAL_H

#include "kiln/kiln_llm.h"

#include <time.h>

/* kiln_chat_template_apply, with strftime_now formatting *now (local time in the public call). */
kiln_status kiln_chat_template_apply_at(const kiln_chat_template *t, const kiln_chat_message *messages, int n,
                                        bool add_generation_prompt, const struct tm *now, char **text, size_t *len);

/* Renders messages_json (a JSON array of message objects, any fields) with tools_json (a JSON array of
 * tool definitions, or NULL: tools is none), as transformers does for the same Python values (JSON
 * numbers that are integral become ints). Errors as kiln_chat_template_apply; malformed JSON is
 * KILN_ERR_PARSE. */
kiln_status kiln_chat_template_apply_json(const kiln_chat_template *t, const char *messages_json,
                                          const char *tools_json, bool add_generation_prompt, const struct tm *now,
                                          char **text, size_t *len);

#endif

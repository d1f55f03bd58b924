#pragma once
// tool_choice required or a named function, as a grammar: the reply is one
// call (or, with parallel_tool_calls, one or more) in the chat template's
// tool-call format, each naming an offered function, with arguments that
// satisfy its parameters' JSON Schema.

#include <string>

#include "base/status.h"
#include "server/chat_messages.h"
#include "template/tool_call_parser.h"

namespace ds {

Result<std::string> tool_choice_gbnf(const ChatConversation& chat, ToolCallFormat format);

}  // namespace ds

// A client tool through the ai package's Chat (what useChat runs): the stream ends at the agent's
// call of ask_user, onToolCall answers it with addToolOutput, and sendAutomaticallyWhen sends the
// message back with its output. Prints the messages and the tool calls asked, as JSON.
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithToolCalls } from "ai";

const [api, chatId, prompt, answer] = process.argv.slice(2);

class State {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage = (message) => {
    this.messages = [...this.messages, message];
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (index, message) => {
    this.messages = [...this.messages.slice(0, index), this.snapshot(message), ...this.messages.slice(index + 1)];
  };
  snapshot = (value) => structuredClone(value);
}

class Chat extends AbstractChat {}

const asked = [];
let finishes = 0;
let done;
const finished = new Promise((resolve) => (done = resolve));
const chat = new Chat({
  id: chatId,
  state: new State(),
  transport: new DefaultChatTransport({ api }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  onToolCall: ({ toolCall }) => {
    asked.push({ toolCallId: toolCall.toolCallId, toolName: toolCall.toolName, input: toolCall.input });
    void chat.addToolOutput({ tool: toolCall.toolName, toolCallId: toolCall.toolCallId, output: answer });
  },
  onFinish: () => {
    if (++finishes === 2) done();
  },
  onError: (error) => {
    console.error(error);
    process.exit(1);
  },
});
await chat.sendMessage({ text: prompt });
await finished;
console.log(JSON.stringify({ asked, messages: chat.messages }));

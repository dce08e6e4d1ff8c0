// A frontend tool through @ag-ui/client's HttpAgent: the run ends at the agent's call of ask_user,
// which the frontend answers with a tool message; the next run delivers it. Prints what the client
// made of it, as JSON.
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, prompt, answer] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });
const events = [];
const subscriber = {
  onEvent({ event }) {
    events.push(event.type === "CUSTOM" ? `CUSTOM:${event.name}` : event.type);
  },
};
const tools = [
  {
    name: "ask_user",
    description: "Ask the user a question.",
    parameters: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
  },
];
agent.addMessage({ id: "u1", role: "user", content: prompt });
await agent.runAgent({ tools }, subscriber);
const asked = [];
for (const message of [...agent.messages]) {
  for (const call of message.toolCalls ?? []) {
    const answered = agent.messages.some((m) => m.role === "tool" && m.toolCallId === call.id);
    if (call.function.name === "ask_user" && !answered) {
      asked.push({ id: call.id, arguments: JSON.parse(call.function.arguments) });
      agent.addMessage({ id: `r-${call.id}`, role: "tool", toolCallId: call.id, content: answer });
    }
  }
}
const { result } = await agent.runAgent({ tools }, subscriber);
console.log(JSON.stringify({ events, asked, messages: agent.messages, result }));

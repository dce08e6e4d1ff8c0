// One AG-UI conversation through @ag-ui/client's HttpAgent: a message, then the approval it waits
// for answered with a resume. Prints what the client made of it, as JSON.
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, prompt] = process.argv.slice(2);
const agent = new HttpAgent({ url, threadId });
const events = [];
const subscriber = {
  onEvent({ event }) {
    events.push(event.type === "CUSTOM" ? `CUSTOM:${event.name}` : event.type);
  },
};
agent.addMessage({ id: "u1", role: "user", content: prompt });
await agent.runAgent({}, subscriber);
const interrupts = agent.pendingInterrupts.map(({ id, reason, toolCallId }) => ({ id, reason, toolCallId }));
const resume = agent.pendingInterrupts.map((i) => ({
  interruptId: i.id,
  status: "resolved",
  payload: { approve: true, reason: "fine" },
}));
const { result } = await agent.runAgent({ resume }, subscriber);
console.log(JSON.stringify({ events, interrupts, messages: agent.messages, result, state: agent.state }));

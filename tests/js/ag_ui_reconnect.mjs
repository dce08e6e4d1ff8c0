// A page that reloads mid-run: one HttpAgent sends the message; once its reply streams, a second
// one (the reloaded page, with no messages of its own) runs on the same thread without sending
// anything, which reconnects. Prints what the second made of it, as JSON.
import { HttpAgent } from "@ag-ui/client";

const [url, threadId, prompt] = process.argv.slice(2);
const first = new HttpAgent({ url, threadId });
first.addMessage({ id: "u1", role: "user", content: prompt });
let streaming;
const streamed = new Promise((resolve) => (streaming = resolve));
const running = first.runAgent({}, { onTextMessageContentEvent: () => streaming() });
await streamed;

const again = new HttpAgent({ url, threadId });
const events = [];
const subscriber = { onEvent: ({ event }) => events.push(event.type === "CUSTOM" ? `CUSTOM:${event.name}` : event.type) };
await again.runAgent({}, subscriber);
await running;
const interrupts = again.pendingInterrupts.map((i) => i.id);
const later = new HttpAgent({ url, threadId });  // reloaded again: nothing runs, the approval waits
await later.runAgent({});
const waiting = later.pendingInterrupts.map((i) => i.id);
console.log(JSON.stringify({ events, messages: again.messages, interrupts, state: again.state, later: later.messages, waiting }));

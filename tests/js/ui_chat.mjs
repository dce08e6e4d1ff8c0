// One useChat turn through the ai package: the transport useChat uses by default posts the
// message, readUIMessageStream reads our UI message stream back into the assistant's message. An
// approval part that waits is approved on the decisions endpoint. Prints the message and the
// types of the chunks it was made of, as JSON.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [api, chatId, prompt, decisions] = process.argv.slice(2);
const transport = new DefaultChatTransport({ api });
const sent = await transport.sendMessages({
  chatId,
  messages: [{ id: "u1", role: "user", parts: [{ type: "text", text: prompt }] }],
  trigger: "submit-message",
  messageId: undefined,
  abortSignal: undefined,
});
const [stream, copy] = sent.tee();
const chunks = [];
const reading = (async () => {
  for await (const chunk of copy) chunks.push(chunk.type);
})();
let last;
const decided = new Set();
for await (const message of readUIMessageStream({ stream, terminateOnError: true })) {
  last = message;
  for (const part of message.parts) {
    if (part.type === "data-approval" && part.data.state === "pending" && !decided.has(part.id)) {
      decided.add(part.id);
      const response = await fetch(decisions, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ call_id: part.data.call_id, approve: true, by: "ui" }),
      });
      if (!response.ok) throw new Error(await response.text());
    }
  }
}
await reading;
console.log(JSON.stringify({ message: last, chunks }));

"""One adapter per wire protocol, each: neutral request in, neutral response out."""

"""Generated code of protocol/frontend_v1.proto (`make sdk-proto`): do not edit."""

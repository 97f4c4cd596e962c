"""The local application (edge, standalone): scheduler phases, launcher and assembly."""

/// A problem that stops startup; printed as one line, without secrets.
struct StartupError: Error, CustomStringConvertible {
    let description: String

    init(_ description: String) {
        self.description = description
    }
}

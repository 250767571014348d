/// A problem that stops startup; printed as one line, without secrets.
package struct StartupError: Error, CustomStringConvertible {
    package let description: String

    package init(_ description: String) {
        self.description = description
    }
}

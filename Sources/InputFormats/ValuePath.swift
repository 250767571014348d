import JSON

/// Where a value sits in a record's document: object keys and array indexes, written
/// `position.latitude`, `geometry.coordinates[1]`, `attributes['fuel.level']`; a negative
/// index counts from the end.
public struct ValuePath: Sendable, Equatable, CustomStringConvertible {
    enum Step: Sendable, Equatable {
        case key(String)
        case index(Int)
    }

    let steps: [Step]
    public let description: String

    struct SyntaxError: Error, Equatable {
        let message: String
    }

    init(parsing text: String) throws(SyntaxError) {
        self.steps = try Self.parse(text)
        self.description = text
    }

    /// The value at the path, nil when any step is missing or `null`.
    func value(in document: JSONValue) -> JSONValue? {
        var current = document
        for step in steps {
            switch (step, current) {
            case (.key(let key), .object(let fields)):
                guard let next = fields[key] else { return nil }
                current = next
            case (.index(let index), .array(let elements)):
                let position = index >= 0 ? index : elements.count + index
                guard elements.indices.contains(position) else { return nil }
                current = elements[position]
            default:
                return nil
            }
        }
        return current == .null ? nil : current
    }

    private static func parse(_ text: String) throws(SyntaxError) -> [Step] {
        var steps: [Step] = []
        var rest = Substring(text)
        guard !rest.isEmpty else { throw SyntaxError(message: "the path is empty") }
        var expectKey = true
        while !rest.isEmpty {
            if rest.first == "[" {
                steps.append(try bracket(&rest))
                expectKey = false
            } else if rest.first == "." {
                guard !steps.isEmpty else { throw SyntaxError(message: "the path starts with '.'") }
                rest.removeFirst()
                expectKey = true
                guard let next = rest.first, next != ".", next != "[" else {
                    throw SyntaxError(message: "an empty key after '.'")
                }
            } else {
                guard expectKey else { throw SyntaxError(message: "'.' or '[' expected after ']'") }
                let key = rest.prefix { $0 != "." && $0 != "[" }
                steps.append(.key(String(key)))
                rest = rest.dropFirst(key.count)
                expectKey = false
            }
        }
        return steps
    }

    /// `[3]`, `[-1]` or `['key']` / `["key"]`.
    private static func bracket(_ rest: inout Substring) throws(SyntaxError) -> Step {
        rest.removeFirst()
        if let quote = rest.first, quote == "'" || quote == "\"" {
            rest.removeFirst()
            guard let end = rest.firstIndex(of: quote) else { throw SyntaxError(message: "an unclosed quote in '[…]'") }
            let key = String(rest[..<end])
            rest = rest[rest.index(after: end)...]
            guard rest.first == "]" else { throw SyntaxError(message: "']' expected after a quoted key") }
            rest.removeFirst()
            return .key(key)
        }
        guard let end = rest.firstIndex(of: "]") else { throw SyntaxError(message: "an unclosed '['") }
        let inside = rest[..<end]
        rest = rest[rest.index(after: end)...]
        guard let index = Int(inside) else {
            throw SyntaxError(message: "'[\(inside)]' is neither an array index nor a quoted key")
        }
        return .index(index)
    }
}

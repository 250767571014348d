/// A list that keeps its first element inline and only the rest in an array. A request nearly
/// always settles records of one partition: an array for that one partition, and another for
/// its revocation flag, were two allocations per request on the warm path.
public struct ShortList<Element> {
    private var first: Element?
    /// Empty (and unallocated) while the list holds at most one element.
    private var others: [Element] = []

    public init() {}

    public init(_ element: Element) {
        first = element
    }

    public mutating func append(_ element: Element) {
        if first == nil { first = element } else { others.append(element) }
    }
}

extension ShortList: RandomAccessCollection {
    public var startIndex: Int { 0 }
    public var endIndex: Int { first == nil ? 0 : others.count + 1 }

    public subscript(position: Int) -> Element {
        guard let first else { preconditionFailure("index \(position) of an empty list") }
        return position == 0 ? first : others[position - 1]
    }
}

extension ShortList: Sendable where Element: Sendable {}

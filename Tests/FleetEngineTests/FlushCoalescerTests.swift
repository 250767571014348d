@testable import HTTPServing
import NIOCore
import NIOEmbedded
import Testing

/// What the emulators write between two flushes reaches TLS as one buffer, in order, so that it
/// is sealed in as few records as its size allows.
@Suite struct FlushCoalescerTests {
    private static func buffer(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    private static func written(_ channel: EmbeddedChannel) throws -> [String] {
        var buffers: [String] = []
        while let data = try channel.readOutbound(as: IOData.self) {
            guard case .byteBuffer(let buffer) = data else { Issue.record("a file region"); continue }
            buffers.append(String(buffer: buffer))
        }
        return buffers
    }

    @Test func writesBetweenFlushesLeaveAsOneBufferAndTheirPromisesComplete() throws {
        let channel = EmbeddedChannel(handler: FlushCoalescer())
        let promises = (0..<3).map { _ in channel.eventLoop.makePromise(of: Void.self) }
        channel.write(Self.buffer("HEADERS|"), promise: promises[0])
        channel.write(Self.buffer("DATA|"), promise: nil)
        channel.write(Self.buffer("DATA-END|"), promise: promises[1])
        #expect(try Self.written(channel).isEmpty, "nothing leaves before the flush")
        channel.flush()
        #expect(try Self.written(channel) == ["HEADERS|DATA|DATA-END|"])

        channel.write(Self.buffer("PING"), promise: promises[2])
        channel.flush()
        #expect(try Self.written(channel) == ["PING"])
        for promise in promises { try promise.futureResult.wait() }
        #expect(try channel.finish().isClean)
    }

    @Test func writesNotFlushedFailWhenTheConnectionCloses() throws {
        let channel = EmbeddedChannel(handler: FlushCoalescer())
        let first = channel.eventLoop.makePromise(of: Void.self)
        let second = channel.eventLoop.makePromise(of: Void.self)
        channel.write(Self.buffer("HEADERS"), promise: first)
        channel.write(Self.buffer("DATA"), promise: second)
        channel.close(promise: nil)
        #expect(throws: ChannelError.self) { try first.futureResult.wait() }
        #expect(throws: ChannelError.self) { try second.futureResult.wait() }
        #expect(try Self.written(channel).isEmpty)
    }
}

/**
 * The called side of a call between two JVMs: an HTTP server (the JDK's own) on a free
 * loopback port, whose handler Greeter.handle answers each request after a little work. Prints
 * "port=N", then serves until its standard input closes, then prints "handled=N".
 *
 * Usage: java HttpCallee
 */
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;

public class HttpCallee {
    static final AtomicInteger HANDLED = new AtomicInteger();

    static class Greeter implements HttpHandler {
        @Override
        public void handle(HttpExchange exchange) throws java.io.IOException {
            byte[] body = greeting(exchange.getRequestURI().getPath()).getBytes(StandardCharsets.UTF_8);
            exchange.sendResponseHeaders(200, body.length);
            try (OutputStream out = exchange.getResponseBody()) {
                out.write(body);
            }
            HANDLED.incrementAndGet();
        }

        static String greeting(String path) {
            long spin = 0;
            int length = path.length();
            for (int i = 0; i < 200_000; i++) {
                spin += i ^ length;
            }
            return "hello " + path + " " + (spin & 1);
        }
    }

    public static void main(String[] args) throws Exception {
        HttpServer server =
                HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 16);
        server.createContext("/", new Greeter());
        server.start();
        System.out.println("port=" + server.getAddress().getPort());
        System.out.flush();
        while (System.in.read() != -1) {
            // serve until standard input closes
        }
        server.stop(0);
        System.out.println("handled=" + HANDLED.get());
    }
}
